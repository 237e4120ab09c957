"""Reward functions a user could write, for tests/reward/test_custom.py and the trainer's test:
each is named ``tests.reward.custom_rewards:NAME`` in a recipe's ``rl.reward``."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from rstar2.reward import extract_answer


def boxed_matches(response: str, gold: str, row: dict) -> float:
    """1 when the last box anywhere is the gold answer as written."""
    return float(extract_answer(response, require_answer_tag=False) == gold)


def long_answers(response: str, gold: str, row: dict) -> float:
    """1 for a response longer than the row's ``min_chars`` (a reward any rollout can earn)."""
    return float(len(response) >= row.get("min_chars", 0))


def odd_length(response: str, gold: str, row: dict) -> dict:
    """1 for a response of odd length, with the length as a metric: rewards that differ within
    a group whatever the model says, so a step of an untrained model has something to learn."""
    return {"reward": float(len(response) % 2), "length": len(response)}


def no_division_by_zero(response: str, gold: str, row: dict) -> float:
    """0 for a response that divides by zero (the calculator step's forced '1/0' call), else 1."""
    return float("1/0" not in response)


async def async_boxed_matches(response: str, gold: str, row: dict) -> bool:
    await asyncio.sleep(0)
    return extract_answer(response, require_answer_tag=False) == gold


def with_metrics(response: str, gold: str, row: dict) -> dict:
    return {"reward": 1.0, "length": len(response), "level": row["level"], "note": "not a number"}


@dataclass
class Judged:
    reward: float
    confidence: float


def judged(response: str, gold: str, row: dict) -> Judged:
    return Judged(reward=0.0, confidence=0.25)


def raises(response: str, gold: str, row: dict) -> float:
    raise RuntimeError(f"no reward for {gold}")


def raises_when_told(response: str, gold: str, row: dict) -> float:
    if row.get("raise"):
        raise ValueError(f"cannot judge {response!r}")
    return boxed_matches(response, gold, row)


def hangs(response: str, gold: str, row: dict) -> float:
    time.sleep(3600)
    return 1.0


def hangs_when_told(response: str, gold: str, row: dict) -> float:
    if row.get("hang"):
        time.sleep(3600)
    return 1.0


def spins(response: str, gold: str, row: dict) -> float:
    while True:
        pass


def half(response: str, gold: str, row: dict) -> float:
    return 0.5


def words(response: str, gold: str, row: dict) -> str:
    return "correct"


def not_a_number(response: str, gold: str, row: dict) -> float:
    return float("nan")


def several(response: str, gold: str, row: dict) -> list[float]:
    return [1.0, 0.0]


def two_arguments(response: str, gold: str) -> float:
    return 1.0


NOT_A_FUNCTION = 3
