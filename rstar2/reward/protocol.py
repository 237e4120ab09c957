"""The one interface every reward meets: a batch of responses in, one ``Score`` per response out.

    scores = await score_batch(reward, [RewardItem(problem, response, answer, row)])
    scores[0].reward, scores[0].correct, scores[0].failure, scores[0].message

The trainer's sampler and the evaluation harness both score through ``score_batch`` and know
nothing of what is behind it: the built-in verifier (``rstar2.reward.Grader``) or a user's
``package.module:function`` (``rstar2.reward.CustomReward``). Each implementation owns its own
batching and deadlines, so a caller hands it what it has (one response as a rollout ends, or a
whole batch) and gets results it can count the same way whatever the reward is.

Why failures are results, not exceptions: a reward call that fails on one response (a check
that overran its deadline, a user's function that raised or returned no number) costs that
response its reward, not the run; the caller counts failures per step (``reward/errors`` ...)
and stops a run whose every call fails (``rstar2.rl.silence``). An implementation that breaks
the protocol itself (a wrong number of results, something that is not a ``Score``, a reward
that is not a finite number) is a bug in the reward, not in a response: ``score_batch``
refuses it with a ``RewardError`` naming the reward.

Imports neither torch nor anything else of rstar2: every layer may use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from rstar2.errors import Rstar2Error

Failure = Literal["error", "timeout", "invalid"]


class RewardError(Rstar2Error, ValueError):
    """A reward that cannot be used (the message names it and what is wrong)."""


@dataclass(frozen=True)
class RewardItem:
    """One response to score, with what a reward may judge it by."""

    problem: str
    """The problem statement the response answers."""
    response: str
    """The assistant's text (its turns, without tool output)."""
    answer: str
    """The reference (gold) answer."""
    row: dict[str, Any] = field(default_factory=dict)
    """The problem's source row as read, under the data set's own field names."""
    answer_tag: bool = True
    """How the response states its final answer, for the built-in verifier: a ``\\boxed{}``
    inside ``<answer>`` (the paper's format), or, False, the last ``\\boxed{}`` anywhere (a
    model that uses no tags). A user's reward reads the response its own way."""


@dataclass(frozen=True)
class Score:
    """What one response earned."""

    reward: float
    """The reward; 0.0 when the call failed."""
    metrics: dict[str, float] = field(default_factory=dict)
    """A custom reward's other numeric fields (empty for a plain number or a failure)."""
    failure: Failure | None = None
    """Why the call earned nothing: 'error' (it raised, or its worker died), 'timeout' (it
    overran the deadline and was killed), 'invalid' (its value is not a usable reward)."""
    message: str | None = None
    """What went wrong, for logs; None on success."""

    @property
    def correct(self) -> bool:
        """A reward of 1: what Resample-on-Correct keeps as correct and what accuracy counts
        (the verifier's rewards are 1 exactly for an equivalent answer)."""
        return self.reward == 1.0


class Reward(Protocol):
    """A reward: anything with a ``name``, ``score`` and ``close``."""

    name: str
    """What error messages call it: the function's ``package.module:function``, or 'verifier'."""

    async def score(self, items: Sequence[RewardItem]) -> list[Score]:
        """One ``Score`` per item, in order. Asynchronous because the trainer scores each rollout
        on its event loop as it ends, while others still generate; an implementation may batch
        concurrent calls. Raises only when the reward as a whole cannot work (its workers were
        closed); a failure on one response is that response's ``Score.failure``."""
        ...

    def close(self) -> None:
        """Stop what the reward started (worker processes); it starts them again on next use."""
        ...


async def score_batch(reward: Reward, items: Sequence[RewardItem]) -> list[Score]:
    """``reward.score(items)``, held to the protocol: one ``Score`` per item, each reward a
    finite number; anything else is a ``RewardError`` that names the reward."""
    items = list(items)
    scores = await reward.score(items)
    problem = protocol_problem(scores, len(items))
    if problem is not None:
        raise RewardError(f"reward {reward.name}: {problem}")
    return scores


def protocol_problem(scores: Any, count: int) -> str | None:
    """What makes ``scores`` no answer to ``count`` items, or None."""
    if not isinstance(scores, list):
        return f"score() returned {type(scores).__name__}, not a list of Score"
    if len(scores) != count:
        return f"score() returned {len(scores)} results for {count} items"
    for index, scored in enumerate(scores):
        if not isinstance(scored, Score):
            return f"result {index} is {type(scored).__name__} {scored!r:.80}, not a Score"
        if isinstance(scored.reward, bool) or not isinstance(scored.reward, (int, float)) \
                or not math.isfinite(scored.reward):
            return f"result {index} has reward {scored.reward!r:.80}, not a finite number"
    return None
