"""A user's reward function behind the verifier's deadlines: plain and async functions, rich
records, and every way it can fail counted as a failure of that response, never raised."""

from __future__ import annotations

import asyncio
import time

import pytest

from rstar2.reward import RewardItem
from rstar2.reward.custom import CustomReward, RewardError

MODULE = "tests.reward.custom_rewards"
RIGHT = "<reason>easy</reason><answer>\\boxed{42}</answer>"


async def score_one(reward, response, gold, row):
    [scored] = await reward.score([RewardItem("a problem", response, gold, row)])
    return scored


def scores(name, pairs, **settings):
    async def run(reward):
        return await asyncio.gather(*(score_one(reward, response, gold, row) for response, gold, row in pairs))

    with CustomReward(f"{MODULE}:{name}", workers=2, **settings) as reward:
        return asyncio.run(run(reward))


@pytest.mark.parametrize("name", ["boxed_matches", "async_boxed_matches"])
def test_plain_and_async_functions_score_each_response(name):
    right, wrong = scores(name, [(RIGHT, "42", {}), (RIGHT, "41", {})])
    assert (right.reward, right.failure, wrong.reward, wrong.failure) == (1.0, None, 0.0, None)


def test_a_record_brings_its_numbers_as_metrics():
    [mapping] = scores("with_metrics", [("abc", "1", {"level": 3})])
    assert mapping.reward == 1.0 and mapping.metrics == {"length": 3.0, "level": 3.0}
    [record] = scores("judged", [("abc", "1", {})])
    assert record.reward == 0.0 and record.metrics == {"confidence": 0.25}


def test_failures_score_zero_and_say_why_and_the_others_are_scored():
    started = time.monotonic()
    failed = scores("raises", [("x", "7", {})])[0]
    hung = scores("hangs", [("x", "7", {})], deadline_s=0.3)[0]
    spun = scores("spins", [("x", "7", {})], deadline_s=0.3)[0]
    assert time.monotonic() - started < 30
    assert failed == failed.__class__(0.0, failure="error", message="RuntimeError: no reward for 7")
    assert hung.failure == spun.failure == "timeout" and hung.reward == 0.0 and "deadline" in hung.message
    invalid = scores("words", [("x", "7", {})])[0]
    assert invalid.failure == "invalid" and "str 'correct'" in invalid.message
    graded = scores("half", [("x", "7", {})], binary=True)[0]
    assert graded.failure == "invalid" and "rl.roc.mode: off" in graded.message
    assert scores("half", [("x", "7", {})])[0].reward == 0.5  # fine without RoC


def test_a_hung_call_does_not_hold_up_the_others():
    async def run(reward):
        hung = asyncio.ensure_future(score_one(reward, "x", "7", {"hang": True}))
        quick = await score_one(reward, "x", "7", {})
        return quick, hung.done(), await hung

    with CustomReward(f"{MODULE}:hangs_when_told", workers=2, deadline_s=1.0) as reward:
        quick, hung_done_then, hung = asyncio.run(run(reward))
    assert quick.reward == 1.0 and not hung_done_then and hung.failure == "timeout"


@pytest.mark.parametrize("path, said", [
    ("no_colon", "expected package.module:function"),
    ("tests.reward.nowhere:f", "cannot import tests.reward.nowhere"),
    (f"{MODULE}:missing", "has no function 'missing'"),
    (f"{MODULE}:NOT_A_FUNCTION", "has no function 'NOT_A_FUNCTION'"),
    (f"{MODULE}:two_arguments", "must take (response, gold, row)"),
])
def test_an_unusable_function_is_refused_when_built(path, said):
    with pytest.raises(RewardError) as caught:
        CustomReward(path)
    assert said in str(caught.value) and "\n" not in str(caught.value)
