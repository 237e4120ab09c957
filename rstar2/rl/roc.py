"""Resample-on-Correct (RoC, report §2.2.3): the rules that pick which of a prompt's rollouts
enter the update. The group algorithms of ``rstar2.rl.advantage`` (one class per ``rl.roc.mode``)
are built from them:

    facts = trajectory_facts(trajectory, reward)           # what RoC reads off a rollout
    decision = group_algorithm(config.rl).select(group_of_facts, rng)

Rewards are binary (1 = correct). With O_pos / O_neg the positive / negative rollouts of a
group of n, and N = ``rl.group_size`` the rollouts a group keeps (the trainer samples n = 2N):

* ``paper`` -- keep ⌊|O_neg|·N/n⌋ negatives (⌊|O_neg|/2⌋ for n = 2N) drawn uniformly, and fill
  the N from O_pos, drawn without replacement with weight 1/(p_total + ε) (draw one, remove it,
  renormalise). p_total = p_err + p_format with
  - p_err (Eq. 4) = failed tool calls / tool calls, or 0.5 without calls;
  - p_format (Eq. 5) = 1 without a closed ``<answer>`` block in the assistant's text, else
    min(1, (answer blocks - 1) / assistant turns).
  A group of N or fewer keeps every rollout (there is nothing to choose).

* ``release`` -- the official code (microsoft/rStar ``rstar2_agent/down_sample/roc.py``):
  a group smaller than N is dropped, one of exactly N is kept whole; otherwise
  round(|O|·N/n) per side (half to even), a side whose share is at or below min(``min_per_side``,
  available) is set to that and the other side fills N; positives are the lowest-penalty ones
  (stable sort), negatives the first ones in rollout order. p_format is the release's text rule
  (``release_format_penalty``): 1 when an answer tag is missing or unbalanced, else min(1,
  (closed answers - 1) / turns) with the turns its regex counts (never the first, nor an
  unclosed last one; 1 when that count is 0).

* ``off`` -- plain GRPO: every rollout is kept.

p_err comes from the calls' recorded outcomes (``rl.roc.error_signal: outcome``, parse errors,
exceptions, timeouts and kills all count), or from the release's text rule (``text``: the share
of ``<tool_response>`` blocks of the response text that contain "error" in any case).

Zero variance: with ``drop_zero_variance`` a group whose rewards are all equal is dropped before
selection (``"uniform_rewards"``, the release's ``reject_equal_reward``); in paper mode a group
whose kept rewards are all equal is dropped too (``"uniform_after_selection"``; e.g. a single
negative, since ⌊1/2⌋ = 0), which the release does not check.

For the step's metrics: ``decision_counts`` (groups used and dropped) and ``rollout_metrics``
(tool calls, failed-call shares overall and inside correct rollouts, mean penalties).
This module does not import torch.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from rstar2.agent.trajectory import ANSWER_PATTERN, Trajectory

DropReason = Literal["uniform_rewards", "uniform_after_selection", "small_group", "stale"]
TOOL_RESPONSE_PATTERN = re.compile(r"<tool_response>.*?</tool_response>", re.DOTALL)


@dataclass(frozen=True)
class TextFacts:
    """What the release reads off a rollout's decoded response text (assistant and tool turns
    alike, so a tool output that prints a tag or the word "error" counts)."""

    answer_openers: int  # occurrences of "<answer>"
    answer_closers: int  # occurrences of "</answer>"
    closed_answers: int  # <answer>...</answer> blocks (non-overlapping, shortest)
    tool_responses: int  # <tool_response>...</tool_response> blocks
    error_responses: int  # of those, the ones containing "error" in any case
    counted_turns: int  # assistant turns after the first that the model closed (the turn regex)


class RolloutFacts(Protocol):
    """What RoC reads from a rollout (counts over the whole multi-turn trajectory)."""

    @property
    def reward(self) -> float: ...  # 1.0 correct, 0.0 otherwise

    @property
    def tool_calls(self) -> int: ...  # tool calls attempted, unparseable ones included

    @property
    def tool_errors(self) -> int: ...  # calls answered with a parse error, exception, timeout or kill

    @property
    def answer_blocks(self) -> int: ...  # closed <answer>...</answer> blocks of the assistant's text

    @property
    def turns(self) -> int: ...  # assistant turns

    @property
    def text(self) -> TextFacts: ...  # the release's view (release mode, error_signal: text)


@dataclass(frozen=True)
class RolloutSummary:
    """A plain record of ``RolloutFacts`` (what the trainer builds from a trajectory)."""

    reward: float
    tool_calls: int
    tool_errors: int
    answer_blocks: int
    turns: int
    text: TextFacts


def trajectory_facts(trajectory: Trajectory, reward: float) -> RolloutSummary:
    """RoC's facts of an agent trajectory that scored ``reward``: every recorded call counts,
    its ``error`` flag (parse error, exception, timeout, kill) marks a failure, and answers are
    the closed ``<answer>`` blocks of the assistant's own text (not of tool output); ``text``
    holds the release's counts over the whole response text."""
    response = "".join(turn.text for turn in trajectory.turns)
    return RolloutSummary(
        reward=reward,
        tool_calls=len(trajectory.tool_calls),
        tool_errors=trajectory.num_tool_errors,
        answer_blocks=len(ANSWER_PATTERN.findall(trajectory.assistant_text)),
        turns=trajectory.num_assistant_turns,
        text=text_facts(response, counted_turns(trajectory)),
    )


def text_facts(response: str, turns_counted: int) -> TextFacts:
    """The release's counts over a response text (``turns_counted``: see ``counted_turns``)."""
    blocks = TOOL_RESPONSE_PATTERN.findall(response)
    return TextFacts(
        answer_openers=response.count("<answer>"),
        answer_closers=response.count("</answer>"),
        closed_answers=len(ANSWER_PATTERN.findall(response)),
        tool_responses=len(blocks),
        error_responses=sum("error" in block.lower() for block in blocks),
        counted_turns=turns_counted,
    )


def counted_turns(trajectory: Trajectory) -> int:
    """The assistant turns the release's regex ``<|im_start|>assistant.*?<|im_end|>`` finds in the
    response: not the first, whose header ends the prompt, nor a last turn that the response
    budget cut before the model closed it. Counted from the turns' structure, so it holds for any
    chat template. A last turn whose tool calls ran was complete even if their output no longer
    fitted (the calls are recorded; a cut turn is never parsed)."""
    last = trajectory.num_assistant_turns - 1
    cut = trajectory.stop_reason == "max_tokens" and not any(c.turn == last for c in trajectory.tool_calls)
    return max(last - cut, 0)


@dataclass(frozen=True)
class GroupDecision:
    """RoC's verdict on one prompt group."""

    kept: tuple[int, ...]
    """Indices of the rollouts that enter the update, ascending; empty when dropped."""
    tool_penalties: tuple[float, ...]
    """p_err of every rollout of the group, in rollout order."""
    format_penalties: tuple[float, ...]
    """p_format of every rollout of the group, in rollout order."""
    dropped: DropReason | None = None
    """Why the group was dropped, or None when it is used."""

    @property
    def penalties(self) -> tuple[float, ...]:
        """p_total of every rollout, in rollout order (for logs)."""
        return tuple(e + f for e, f in zip(self.tool_penalties, self.format_penalties))


def tool_error_ratio(rollout: RolloutFacts) -> float:
    """p_err (Eq. 4) from call outcomes; 0.5 without calls, a default that nudges the model to
    use the tool."""
    if rollout.tool_calls == 0:
        return 0.5
    return rollout.tool_errors / rollout.tool_calls


def text_error_ratio(rollout: RolloutFacts) -> float:
    """p_err by the release's text rule: tool-response blocks containing "error" / blocks, 0.5
    without any block."""
    text = rollout.text
    if text.tool_responses == 0:
        return 0.5
    return text.error_responses / text.tool_responses


def format_penalty(rollout: RolloutFacts) -> float:
    """p_format (Eq. 5): 1 with no answer, else the share of surplus answers per turn, capped."""
    if rollout.answer_blocks == 0:
        return 1.0
    return min(1.0, (rollout.answer_blocks - 1) / rollout.turns)


def release_format_penalty(rollout: RolloutFacts) -> float:
    """p_format as the release computes it: 1 when either answer tag is missing, when either
    tag's count differs from the closed blocks (a stray opener or closer), or when its regex
    counts no turn (a one-turn answer); else min(1, (closed answers - 1) / counted turns)."""
    text = rollout.text
    if min(text.answer_openers, text.answer_closers) == 0:
        return 1.0
    if text.answer_openers != text.closed_answers or text.answer_closers != text.closed_answers:
        return 1.0
    if text.counted_turns == 0:
        return 1.0
    return min(1.0, (text.closed_answers - 1) / text.counted_turns)


def total_penalty(rollout: RolloutFacts) -> float:
    """p_total = p_err + p_format of the paper (outcomes, Eq. 5), in [0, 2]."""
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


def uniform(rewards: Iterable[float]) -> bool:
    """All rewards equal: the group carries no learning signal."""
    return len(set(rewards)) <= 1


def sides(rewards: Sequence[float]) -> tuple[list[int], list[int]]:
    """Indices of the positive and of the negative rollouts, each in rollout order."""
    positives = [i for i, reward in enumerate(rewards) if reward == 1.0]
    negatives = [i for i, reward in enumerate(rewards) if reward == 0.0]
    return positives, negatives


def paper_keep_counts(positives: int, negatives: int, keep: int) -> tuple[int, int]:
    """(positives kept, negatives kept) of the paper's rule for a group larger than ``keep``:
    ⌊negatives·keep/n⌋ negatives (half of them when n = 2·keep), the rest positives."""
    kept_negatives = negatives * keep // (positives + negatives)
    return keep - kept_negatives, kept_negatives


def release_keep_counts(positives: int, negatives: int, keep: int, floor: int) -> tuple[int, int]:
    """(positives kept, negatives kept) of the release's rule for a group larger than ``keep``
    (its ``roc.py:59-73``). The release's branch for both sides below the floor cannot be reached
    when 2·floor <= keep, which ``RLConfig`` enforces as the release asserts."""
    size = positives + negatives
    kept_negatives = round(negatives * keep / size)  # half to even, as Python (and so the release)
    kept_positives = round(positives * keep / size)
    if kept_negatives <= min(floor, negatives):  # "at or below": a side at the floor also
        kept_negatives = min(floor, negatives)  # makes the other side fill the group
        kept_positives = keep - kept_negatives
    if kept_positives <= min(floor, positives):
        kept_positives = min(floor, positives)
        kept_negatives = keep - kept_positives
    if kept_positives + kept_negatives != keep:
        # odd keep, both shares exactly half-way and neither side at its floor: the release's
        # assertion stops the run; the negatives' count stands and the positives fill the group
        kept_positives = keep - kept_negatives
    return kept_positives, kept_negatives


def paper_choice(
    rewards: Sequence[float], penalties: Sequence[float], keep: int, epsilon: float, rng: np.random.Generator
) -> tuple[int, ...]:
    """Negatives uniformly; positives without replacement with weight 1/(p_total + epsilon)."""
    positives, negatives = sides(rewards)
    n_pos, n_neg = paper_keep_counts(len(positives), len(negatives), keep)
    kept = [int(i) for i in rng.choice(negatives, size=n_neg, replace=False)] if n_neg else []
    if n_pos:
        weights = np.array([1.0 / (penalties[i] + epsilon) for i in positives])
        drawn = rng.choice(positives, size=n_pos, replace=False, p=weights / weights.sum())
        kept += [int(i) for i in drawn]
    return tuple(sorted(kept))


def release_choice(
    rewards: Sequence[float], penalties: Sequence[float], keep: int, floor: int
) -> tuple[int, ...]:
    """The lowest-penalty positives (stable sort) and the first negatives in rollout order."""
    positives, negatives = sides(rewards)
    n_pos, n_neg = release_keep_counts(len(positives), len(negatives), keep, floor)
    return tuple(sorted(sorted(positives, key=lambda i: penalties[i])[:n_pos] + negatives[:n_neg]))


def decision_counts(decisions: Sequence[GroupDecision]) -> dict[str, float]:
    """Group counts for the step's metrics: used, dropped by reason, and the dropped share."""
    reasons = Counter(decision.dropped for decision in decisions)
    dropped = len(decisions) - reasons[None]
    return {
        "roc/groups": float(len(decisions)),
        "roc/groups_used": float(reasons[None]),
        "roc/dropped_uniform_rewards": float(reasons["uniform_rewards"]),
        "roc/dropped_uniform_after_selection": float(reasons["uniform_after_selection"]),
        "roc/dropped_small_group": float(reasons["small_group"]),
        "roc/dropped_stale": float(reasons["stale"]),
        "roc/dropped_share": dropped / len(decisions) if decisions else 0.0,
    }


def rollout_metrics(rollouts: Sequence[RolloutFacts], decisions: Sequence[GroupDecision]) -> dict[str, float]:
    """The step's tool and penalty metrics over the rollouts given (the sampled ones, before
    selection, for the report's Fig. 4): calls per rollout, the share of failed calls (by
    outcome) overall and inside correct rollouts (the quantity RoC drives down), and the mean
    p_err / p_format that the groups' ``decisions`` measured (so by the mode's rules)."""
    positives = [r for r in rollouts if r.reward == 1.0]
    n = max(len(rollouts), 1)
    return {
        "tools/calls_per_rollout": sum(r.tool_calls for r in rollouts) / n,
        "tools/error_ratio": failed_share(rollouts),
        "tools/error_ratio_in_positives": failed_share(positives),
        "roc/tool_error_penalty_mean": sum(sum(d.tool_penalties) for d in decisions) / n,
        "roc/format_penalty_mean": sum(sum(d.format_penalties) for d in decisions) / n,
    }


def failed_share(rollouts: Sequence[RolloutFacts]) -> float:
    """Failed tool calls / tool calls, pooled over rollouts (0 without calls)."""
    calls = sum(r.tool_calls for r in rollouts)
    return sum(r.tool_errors for r in rollouts) / calls if calls else 0.0
