"""The one reward interface (``rstar2.reward.protocol``): the built-in verifier and a user's
function answer the same call with the same kind of results; a failure on one response is that
response's result, never an exception; a reward that breaks the interface is refused by name."""

from __future__ import annotations

import asyncio
import math

import pytest

from rstar2.reward import CustomReward, Grader, RewardError, RewardItem, Score, score_batch
from rstar2.rl.silence import SilenceWatch
from tests.reward.test_grading import HOSTILE_ANSWERS

MODULE = "tests.reward.custom_rewards"
ITEMS = [
    RewardItem("What is 6 * 7?", "<reason>6 * 7</reason><answer>\\boxed{42}</answer>", "42"),
    RewardItem("What is 6 * 7?", "<reason>6 * 7</reason><answer>\\boxed{41}</answer>", "42"),
    RewardItem("What is 1 + 2?", "so \\boxed{3}", "3", answer_tag=False),
]


def scored(reward, items) -> list[Score]:
    return asyncio.run(score_batch(reward, items))


def test_the_verifier_and_a_custom_reward_answer_the_same_call_alike():
    with Grader(workers=1) as verifier, CustomReward(f"{MODULE}:boxed_matches", workers=1) as custom:
        by_verifier, by_custom = scored(verifier, ITEMS), scored(custom, ITEMS)
    for scores in (by_verifier, by_custom):
        assert [type(s) for s in scores] == [Score] * len(ITEMS)
        assert [(s.reward, s.correct, s.failure, s.message) for s in scores] == [
            (1.0, True, None, None), (0.0, False, None, None), (1.0, True, None, None)]


def test_concurrent_calls_on_one_loop_each_get_their_own_results_in_order():
    async def rollouts_ending(reward):
        return await asyncio.gather(*(score_batch(reward, [item]) for item in ITEMS * 3))

    with Grader(workers=1) as verifier:
        scores = asyncio.run(rollouts_ending(verifier))
        again = scored(verifier, ITEMS)  # a second event loop, the same workers
    assert [s.correct for [s] in scores] == [True, False, True] * 3
    assert [s.correct for s in again] == [True, False, True]


def test_a_custom_reward_that_raises_fails_that_item_with_its_reason():
    items = [ITEMS[0], RewardItem("p", "x", "7", {"raise": True}), ITEMS[2]]
    with CustomReward(f"{MODULE}:raises_when_told", workers=2) as custom:
        first, failed, last = scored(custom, items)
    assert (first.reward, last.reward, first.failure, last.failure) == (1.0, 1.0, None, None)
    assert failed == Score(0.0, failure="error", message="ValueError: cannot judge 'x'")
    assert not failed.correct


def test_a_verifier_check_that_overruns_is_a_failed_item():
    with Grader(workers=1, deadline_s=0.5) as verifier:
        hostile, fine = scored(verifier, [RewardItem("p", f"\\boxed{{{HOSTILE_ANSWERS['power tower']}}}", "1/7",
                                                     answer_tag=False),
                                          ITEMS[0]])
    assert hostile.failure == "timeout" and hostile.reward == 0.0 and "overran" in hostile.message
    assert fine.correct and fine.failure is None


@pytest.mark.parametrize("function, said", [
    ("words", "returned str 'correct': not a number or a record with a reward"),
    ("not_a_number", "returned the reward nan, not a finite number"),
    ("several", "returned a list of 2 values: a reward function scores one response per call"),
])
def test_a_bad_value_from_a_custom_reward_is_refused_naming_the_reward(function, said):
    with CustomReward(f"{MODULE}:{function}", workers=1) as custom:
        [refused] = scored(custom, [ITEMS[0]])
    assert refused.failure == "invalid" and refused.reward == 0.0
    assert refused.message.startswith(f"reward {MODULE}:{function} ") and said in refused.message


class Broken:
    """A ``Reward`` of one's own that answers with ``answer`` whatever it is asked."""

    name = "mine:broken"

    def __init__(self, answer):
        self.answer = answer

    async def score(self, items):
        return self.answer

    def close(self) -> None:
        pass


@pytest.mark.parametrize("answer, said", [
    ([Score(1.0)], "score() returned 1 results for 2 items"),
    ((Score(1.0), Score(0.0)), "score() returned tuple, not a list of Score"),
    ([Score(1.0), 0.0], "result 1 is float 0.0, not a Score"),
    ([Score(1.0), Score(math.nan)], "result 1 has reward nan, not a finite number"),
    ([Score(1.0), Score("1")], "result 1 has reward '1', not a finite number"),
])
def test_a_reward_that_breaks_the_interface_is_refused_by_name(answer, said):
    with pytest.raises(RewardError) as caught:
        scored(Broken(answer), ITEMS[:2])
    assert str(caught.value) == f"reward mine:broken: {said}"


def test_a_step_whose_every_reward_call_failed_is_counted_whatever_the_reward():
    watch = SilenceWatch(limit=2)
    with CustomReward(f"{MODULE}:raises", workers=1) as custom, Grader(workers=1) as verifier:
        watch.record(True, scored(custom, ITEMS))
        assert watch.failing == 1
        watch.record(True, scored(verifier, ITEMS))
    assert watch.failing == 0 and not watch.reached()
