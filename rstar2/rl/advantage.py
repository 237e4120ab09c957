"""The group step: which of a prompt's rollouts enter the update, and the advantage each carries.

    algorithm = group_algorithm(config.rl)                 # GROUP_ALGORITHMS[rl.roc.mode]
    decision = algorithm.select(facts_of_one_group, rng)   # kept indices, penalties, drop reason
    advantages = algorithm.advantages(kept_rewards)        # one float per kept rollout

One class per ``rl.roc.mode``: ``PaperRoC`` (the report's rule), ``ReleaseRoC`` (the official
code's), ``PlainGRPO`` (no selection). A new group algorithm is one ``GroupAlgorithm`` subclass
registered in ``GROUP_ALGORITHMS`` under the name ``RocConfig.mode`` accepts; the rules the RoC
classes combine are in ``rstar2.rl.roc``.

Advantages (report Eq. 7): each rollout's is (r - mean) / (std + epsilon) over the kept rollouts
of its prompt (not over all sampled), and every token of the rollout carries it. ``std`` is the
unbiased sample std (torch's default, which verl and hence the release use); ``epsilon``
(``rl.loss.std_epsilon``, 1e-6 as verl) keeps near-uniform groups finite. A group whose rewards
are all equal has std 0 and gets advantage exactly 0 for every rollout: it carries no signal,
which is why RoC usually drops it before it gets here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import torch

from rstar2.rl.config import RLConfig
from rstar2.rl.roc import (
    GroupDecision,
    RolloutFacts,
    check_rollout,
    format_penalty,
    paper_choice,
    release_choice,
    release_format_penalty,
    text_error_ratio,
    tool_error_ratio,
    uniform,
)

PenaltyRule = Callable[[RolloutFacts], float]


def group_advantages(rewards: torch.Tensor, epsilon: float) -> torch.Tensor:
    """``rewards`` ``[groups, G]`` (G >= 2) -> advantages of the same shape."""
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [groups, G] with G >= 2, got shape {tuple(rewards.shape)}")
    rewards = rewards.float()
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)
    normalised = (rewards - mean) / (std + epsilon)
    return torch.where(std > 0, normalised, torch.zeros_like(normalised))


class GroupAlgorithm(ABC):
    """A prompt group's rollouts in, the kept ones and their advantages out.

    Built from the ``rl`` section: ``keep`` is ``rl.group_size`` (G, the rollouts a group keeps;
    the trainer samples ``rl.rollouts_per_prompt`` of them), ``roc`` its switches. Subclasses
    implement ``select``; ``advantages`` is Eq. 7 unless they override it."""

    format_rule: PenaltyRule = staticmethod(format_penalty)
    """p_format of one rollout (logged by every mode, used for selection by the RoC modes)."""

    def __init__(self, rl: RLConfig):
        self.roc = rl.roc
        self.keep = rl.group_size
        self.std_epsilon = rl.loss.std_epsilon

    @abstractmethod
    def select(self, rollouts: Sequence[RolloutFacts], rng: np.random.Generator) -> GroupDecision:
        """The verdict on one prompt's rollouts; ``rng`` is the only source of randomness."""

    def advantages(self, rewards: Sequence[float]) -> list[float]:
        """Group-normalised advantages of the kept rollouts' ``rewards`` (Eq. 7)."""
        return group_advantages(torch.tensor([list(rewards)]), self.std_epsilon)[0].tolist()

    def measured(self, rollouts: Sequence[RolloutFacts]) -> GroupDecision:
        """A verdict that keeps nothing yet, carrying every rollout's p_err (by
        ``rl.roc.error_signal``) and p_format (by ``format_rule``), after checking the facts."""
        for rollout in rollouts:
            check_rollout(rollout)
        error_rule = text_error_ratio if self.roc.error_signal == "text" else tool_error_ratio
        return GroupDecision((), tuple(map(error_rule, rollouts)), tuple(map(self.format_rule, rollouts)))


class PaperRoC(GroupAlgorithm):
    """§2.2.3 as written (``rstar2.rl.roc``, ``paper``): uniform negatives, positives drawn with
    weight 1/(p_total + eps); a group of ``keep`` or fewer is kept whole."""

    def select(self, rollouts, rng):
        measured = self.measured(rollouts)
        rewards = [rollout.reward for rollout in rollouts]
        if self.roc.drop_zero_variance and uniform(rewards):
            return replace(measured, dropped="uniform_rewards")
        if len(rollouts) <= self.keep:
            return replace(measured, kept=tuple(range(len(rollouts))))
        kept = paper_choice(rewards, measured.penalties, self.keep, self.roc.penalty_epsilon, rng)
        if self.roc.drop_zero_variance and uniform(rewards[i] for i in kept):
            return replace(measured, dropped="uniform_after_selection")
        return replace(measured, kept=kept)


class ReleaseRoC(GroupAlgorithm):
    """The official code rule for rule (``rstar2.rl.roc``, ``release``): equal rewards dropped
    first, a group below ``keep`` dropped and one of exactly ``keep`` kept whole, proportional
    counts with a floor per side, sorted positives, negatives in rollout order, the release's
    format penalty. Deterministic: ``rng`` is not used."""

    format_rule = staticmethod(release_format_penalty)

    def select(self, rollouts, rng):
        measured = self.measured(rollouts)
        rewards = [rollout.reward for rollout in rollouts]
        if self.roc.drop_zero_variance and uniform(rewards):
            return replace(measured, dropped="uniform_rewards")
        if len(rollouts) < self.keep:
            return replace(measured, dropped="small_group")
        if len(rollouts) == self.keep:
            return replace(measured, kept=tuple(range(len(rollouts))))
        kept = release_choice(rewards, measured.penalties, self.keep, self.roc.min_per_side)
        return replace(measured, kept=kept)


class PlainGRPO(GroupAlgorithm):
    """No selection (``off``): every sampled rollout is kept; equal-reward groups are still
    dropped with ``drop_zero_variance``. Penalties are measured for the logs only."""

    def select(self, rollouts, rng):
        measured = self.measured(rollouts)
        if self.roc.drop_zero_variance and uniform(rollout.reward for rollout in rollouts):
            return replace(measured, dropped="uniform_rewards")
        return replace(measured, kept=tuple(range(len(rollouts))))


GROUP_ALGORITHMS: dict[str, type[GroupAlgorithm]] = {
    "paper": PaperRoC,
    "release": ReleaseRoC,
    "off": PlainGRPO,
}
"""``rl.roc.mode`` -> its group algorithm."""


def group_algorithm(rl: RLConfig) -> GroupAlgorithm:
    """The group algorithm ``rl.roc.mode`` names, built from the ``rl`` section."""
    return GROUP_ALGORITHMS[rl.roc.mode](rl)
