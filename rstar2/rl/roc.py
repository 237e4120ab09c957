"""Resample-on-Correct (RoC, report §2.2.3): which of a prompt's rollouts enter the update.

    decision = select_group(rollouts, config, rng)

``rollouts`` are the 2G rollouts of one prompt (G when RoC is off), as any objects with the five
fields of ``RolloutFacts`` (``trajectory_facts`` makes them from an ``rstar2.agent`` trajectory);
``config`` is ``rl.roc``; ``rng`` a numpy ``Generator`` (the only source of randomness, so a
seeded generator makes every decision reproducible). The returned ``GroupDecision`` lists the
kept indices in rollout order, each rollout's penalties, and, when the group carries no
learning signal, why it was dropped.

Rewards are binary (1 = correct). With O_pos / O_neg the positive / negative rollouts:

* ``paper`` -- keep ⌊|O_neg|/2⌋ negatives drawn uniformly, and the other G - ⌊|O_neg|/2⌋ =
  ⌈|O_pos|/2⌉ from O_pos, drawn without replacement with weight 1/(p_total + ε) (draw one,
  remove it, renormalise), where p_total = p_err + p_format:

  - p_err = erroneous tool calls / tool calls, or 0.5 without calls (Eq. 4); parse errors,
    execution errors and timeouts all count as erroneous;
  - p_format = 1 without an ``<answer>`` block, else min(1, (answer blocks - 1) / turns) (Eq. 5).

* ``release`` -- the official code: keep round(|O_neg|·G/2G) negatives (half to even) and G minus
  that positives, then raise a side below ``min_per_side`` to min(floor, available) and let the
  other side fill G; positives are the lowest-penalty ones (stable sort), negatives the first ones
  in rollout order. For even G this equals the release exactly; for odd G, where the release's
  two roundings can miss G, this variant still keeps exactly G.

* ``off`` -- plain GRPO: all rollouts are kept.

Zero variance: with ``drop_zero_variance`` a group whose rewards are all equal is dropped before
selection (``"uniform_rewards"``); in paper mode a group with a single negative keeps no negative
(⌊1/2⌋ = 0), so its kept rewards are all 1 and it is dropped too (``"uniform_after_selection"``).

For the step's metrics: ``decision_counts`` (groups used and dropped) and ``rollout_metrics``
(tool calls, failed-call shares overall and inside correct rollouts, mean penalties).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from rstar2.agent.trajectory import ANSWER_PATTERN, Trajectory
from rstar2.rl.config import RocConfig

DropReason = Literal["uniform_rewards", "uniform_after_selection"]


class RolloutFacts(Protocol):
    """What RoC reads from a rollout (counts over the whole multi-turn trajectory)."""

    @property
    def reward(self) -> float: ...  # 1.0 correct, 0.0 otherwise

    @property
    def tool_calls(self) -> int: ...  # tool calls attempted, unparseable ones included

    @property
    def tool_errors(self) -> int: ...  # calls answered with a parse error, exception or timeout

    @property
    def answer_blocks(self) -> int: ...  # closed <answer>...</answer> blocks

    @property
    def turns(self) -> int: ...  # assistant turns


@dataclass(frozen=True)
class RolloutSummary:
    """A plain record of ``RolloutFacts`` (what the trainer builds from a trajectory)."""

    reward: float
    tool_calls: int
    tool_errors: int
    answer_blocks: int
    turns: int


def trajectory_facts(trajectory: Trajectory, reward: float) -> RolloutSummary:
    """RoC's facts of an agent trajectory that scored ``reward``: every recorded call counts,
    its ``error`` flag (parse error, exception, timeout, kill) marks a failure, and answers are
    the closed ``<answer>`` blocks of the assistant's own text (not of tool output)."""
    return RolloutSummary(
        reward=reward,
        tool_calls=len(trajectory.tool_calls),
        tool_errors=trajectory.num_tool_errors,
        answer_blocks=len(ANSWER_PATTERN.findall(trajectory.assistant_text)),
        turns=trajectory.num_assistant_turns,
    )


@dataclass(frozen=True)
class GroupDecision:
    """RoC's verdict on one prompt group."""

    kept: tuple[int, ...]
    """Indices of the rollouts that enter the update, ascending; empty when dropped."""
    penalties: tuple[float, ...]
    """p_total of every rollout of the group, in rollout order (for logs)."""
    dropped: DropReason | None = None
    """Why the group was dropped, or None when it is used."""


def tool_error_ratio(rollout: RolloutFacts) -> float:
    """p_err (Eq. 4); 0.5 without calls, a default that nudges the model to use the tool."""
    if rollout.tool_calls == 0:
        return 0.5
    return rollout.tool_errors / rollout.tool_calls


def format_penalty(rollout: RolloutFacts) -> float:
    """p_format (Eq. 5): 1 with no answer, else the share of surplus answers per turn, capped."""
    if rollout.answer_blocks == 0:
        return 1.0
    return min(1.0, (rollout.answer_blocks - 1) / rollout.turns)


def total_penalty(rollout: RolloutFacts) -> float:
    """p_total = p_err + p_format, in [0, 2]."""
    return tool_error_ratio(rollout) + format_penalty(rollout)


def check_rollout(rollout: RolloutFacts) -> None:
    """Reject facts RoC cannot interpret, naming the bad one."""
    if rollout.reward not in (0.0, 1.0):
        raise ValueError(f"RoC needs binary rewards (0 or 1), got {rollout.reward!r}")
    if not 0 <= rollout.tool_errors <= rollout.tool_calls:
        raise ValueError(
            f"tool_errors must lie in [0, tool_calls], got {rollout.tool_errors} of {rollout.tool_calls}"
        )
    if rollout.turns < 1 or rollout.answer_blocks < 0:
        raise ValueError(
            f"a rollout has at least one turn and no negative answer count, got "
            f"turns={rollout.turns}, answer_blocks={rollout.answer_blocks}"
        )


def paper_keep_counts(positives: int, negatives: int) -> tuple[int, int]:
    """(positives kept, negatives kept) of the paper's rule for a group of 2G."""
    group_size = (positives + negatives) // 2
    kept_negatives = negatives // 2
    return group_size - kept_negatives, kept_negatives


def release_keep_counts(positives: int, negatives: int, floor: int) -> tuple[int, int]:
    """(positives kept, negatives kept) of the release's rule for a group of 2G."""
    group_size = (positives + negatives) // 2
    kept_negatives = round(negatives / 2)  # Python rounds half to even, as the release does
    if kept_negatives < min(floor, negatives):
        kept_negatives = min(floor, negatives)
    if group_size - kept_negatives < min(floor, positives):
        kept_negatives = group_size - min(floor, positives)
    return group_size - kept_negatives, kept_negatives


def select_group(
    rollouts: Sequence[RolloutFacts], config: RocConfig, rng: np.random.Generator
) -> GroupDecision:
    """Apply RoC to one prompt's rollouts (see the module docstring)."""
    for rollout in rollouts:
        check_rollout(rollout)
    if config.mode != "off" and len(rollouts) % 2:
        raise ValueError(f"RoC selects G of 2G rollouts; got an odd group of {len(rollouts)}")
    penalties = tuple(total_penalty(rollout) for rollout in rollouts)
    rewards = [rollout.reward for rollout in rollouts]
    if config.drop_zero_variance and len(set(rewards)) == 1:
        return GroupDecision((), penalties, "uniform_rewards")
    kept = choose(rewards, penalties, config, rng)
    if config.drop_zero_variance and len({rewards[i] for i in kept}) == 1:
        return GroupDecision((), penalties, "uniform_after_selection")
    return GroupDecision(kept, penalties)


def choose(
    rewards: Sequence[float], penalties: Sequence[float], config: RocConfig, rng: np.random.Generator
) -> tuple[int, ...]:
    """The kept indices under ``config.mode``, ascending."""
    if config.mode == "off":
        return tuple(range(len(rewards)))
    positives = [i for i, reward in enumerate(rewards) if reward == 1.0]
    negatives = [i for i, reward in enumerate(rewards) if reward == 0.0]
    if config.mode == "paper":
        kept = paper_choice(positives, negatives, penalties, config.penalty_epsilon, rng)
    else:
        kept = release_choice(positives, negatives, penalties, config.min_per_side)
    return tuple(sorted(kept))


def paper_choice(
    positives: list[int],
    negatives: list[int],
    penalties: Sequence[float],
    epsilon: float,
    rng: np.random.Generator,
) -> list[int]:
    """Negatives uniformly; positives without replacement with weight 1/(p_total + epsilon)."""
    n_pos, n_neg = paper_keep_counts(len(positives), len(negatives))
    kept = [int(i) for i in rng.choice(negatives, size=n_neg, replace=False)] if n_neg else []
    if n_pos:
        weights = np.array([1.0 / (penalties[i] + epsilon) for i in positives])
        drawn = rng.choice(positives, size=n_pos, replace=False, p=weights / weights.sum())
        kept += [int(i) for i in drawn]
    return kept


def release_choice(
    positives: list[int], negatives: list[int], penalties: Sequence[float], floor: int
) -> list[int]:
    """The lowest-penalty positives (stable sort) and the first negatives in rollout order."""
    n_pos, n_neg = release_keep_counts(len(positives), len(negatives), floor)
    return sorted(positives, key=lambda i: penalties[i])[:n_pos] + negatives[:n_neg]


def decision_counts(decisions: Sequence[GroupDecision]) -> dict[str, float]:
    """Group counts for the step's metrics: used, dropped by reason, and the dropped share."""
    reasons = Counter(decision.dropped for decision in decisions)
    dropped = len(decisions) - reasons[None]
    return {
        "roc/groups": float(len(decisions)),
        "roc/groups_used": float(reasons[None]),
        "roc/dropped_uniform_rewards": float(reasons["uniform_rewards"]),
        "roc/dropped_uniform_after_selection": float(reasons["uniform_after_selection"]),
        "roc/dropped_share": dropped / len(decisions) if decisions else 0.0,
    }


def rollout_metrics(rollouts: Sequence[RolloutFacts]) -> dict[str, float]:
    """The step's tool and penalty metrics over the rollouts given (the sampled ones, before
    selection, for the report's Fig. 4): calls per rollout, the share of failed calls overall and
    inside correct rollouts (the quantity RoC drives down), and mean p_err / p_format."""
    positives = [r for r in rollouts if r.reward == 1.0]
    n = max(len(rollouts), 1)
    return {
        "tools/calls_per_rollout": sum(r.tool_calls for r in rollouts) / n,
        "tools/error_ratio": failed_share(rollouts),
        "tools/error_ratio_in_positives": failed_share(positives),
        "roc/tool_error_penalty_mean": sum(map(tool_error_ratio, rollouts)) / n,
        "roc/format_penalty_mean": sum(map(format_penalty, rollouts)) / n,
    }


def failed_share(rollouts: Sequence[RolloutFacts]) -> float:
    """Failed tool calls / tool calls, pooled over rollouts (0 without calls)."""
    calls = sum(r.tool_calls for r in rollouts)
    return sum(r.tool_errors for r in rollouts) / calls if calls else 0.0
