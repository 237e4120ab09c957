"""Answer extraction, equivalence and deadline-bounded grading: the reward of rStar2-Agent.

Imports neither torch nor sympy: the symbolic checker is imported only by the worker
processes that run it.

    extract_answer(response)        the last \\boxed{} (or list of boxes) inside <answer>...</answer>, or None
    is_equivalent(pred, gold)       same answer? (decided within 2 s of CPU time)
    score(response, gold)           the binary reward, 0.0 or 1.0
    grade_many(pairs)               Grades for (response, gold) pairs, in parallel on all cores
    Grader                          the same with a pool kept across batches
    CustomReward(path)              your own `package.module:function` reward under the same deadlines
"""

from rstar2.reward.custom import CustomReward, RewardError, Score
from rstar2.reward.extract import extract_answer
from rstar2.reward.grading import (
    DEFAULT_DEADLINE_S,
    Grade,
    Grader,
    grade_many,
    is_equivalent,
    score,
)

__all__ = [
    "CustomReward",
    "RewardError",
    "Score",
    "DEFAULT_DEADLINE_S",
    "Grade",
    "Grader",
    "extract_answer",
    "grade_many",
    "is_equivalent",
    "score",
]
