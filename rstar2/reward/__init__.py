"""Answer extraction, equivalence and deadline-bounded grading: the reward of rStar2-Agent.

Imports neither torch nor sympy: the symbolic checker is imported only by the worker
processes that run it.

    Reward, RewardItem, Score       the one interface the trainer and eval score through
    score_batch(reward, items)      one Score per item, the reward held to that interface
    Grader                          the built-in verifier, a Reward (a pool kept across batches)
    CustomReward(path)              your own `package.module:function` reward, a Reward under
                                    the verifier's deadlines
    extract_answer(response)        the last \\boxed{} (or list of boxes) inside <answer>...</answer>, or None
    is_equivalent(pred, gold)       same answer? (decided within 2 s of CPU time)
    score(response, gold)           the binary reward, 0.0 or 1.0
    grade_many(pairs)               Grades for (response, gold) pairs, in parallel on all cores
"""

from rstar2.reward.custom import CustomReward
from rstar2.reward.extract import extract_answer
from rstar2.reward.grading import (
    DEFAULT_DEADLINE_S,
    Grade,
    Grader,
    grade_many,
    is_equivalent,
    score,
)
from rstar2.reward.protocol import Reward, RewardError, RewardItem, Score, score_batch

__all__ = [
    "CustomReward",
    "Reward",
    "RewardError",
    "RewardItem",
    "Score",
    "DEFAULT_DEADLINE_S",
    "Grade",
    "Grader",
    "extract_answer",
    "grade_many",
    "is_equivalent",
    "score",
    "score_batch",
]
