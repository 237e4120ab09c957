"""Group-normalised advantages over the rollouts RoC kept (report Eq. 7).

    advantages = group_advantages(rewards, epsilon)      # rewards: [groups, G]

Each rollout's advantage is (r - mean) / (std + epsilon) over the G kept rollouts of its prompt
(not over the 2G sampled), and every token of the rollout carries it. ``std`` is the unbiased
sample std (torch's default, which verl and hence the release use); ``epsilon`` (``rl.loss.
std_epsilon``, 1e-6 as verl) keeps near-uniform groups finite. A group whose rewards are all
equal has std 0 and gets advantage exactly 0 for every rollout: it carries no signal, which is
why RoC usually drops it before it gets here.
"""

from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, epsilon: float) -> torch.Tensor:
    """``rewards`` ``[groups, G]`` (G >= 2) -> advantages of the same shape."""
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [groups, G] with G >= 2, got shape {tuple(rewards.shape)}")
    rewards = rewards.float()
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)
    normalised = (rewards - mean) / (std + epsilon)
    return torch.where(std > 0, normalised, torch.zeros_like(normalised))
