"""Importance weights for tokens sampled by another copy of the policy than the trainer's.

    weights, sums = behaviour_weights(old_logprobs, behaviour_logprobs, rollout_ids, mask, config)

Even a synchronous step is off-policy when the engine samples from its own copy of the weights:
a bfloat16 copy, other kernels, a vLLM engine. The PPO ratio is taken against ``old_logprobs``,
the trainer's recomputation at the sampling weights, so it starts at exactly 1; what the engine
actually sampled from differs by w = exp(old - behaviour) per token, and the policy-gradient
term of each token is multiplied by a detached function of w (``LossConfig.behaviour_correction``):
truncated at the cap (TIS) or zeroed outside [1/cap, cap] (MIS/IcePop), per token or per rollout
(the geometric mean of its tokens' w). Tokens outside the loss mask get weight 0.

The sums feed ``LossStats``: the applied weights' sum and largest value, how many tokens the
cap changed (truncated or masked), the k3 estimate of KL(π_engine ‖ π_trainer), which is the
mismatch itself, whether or not anything is corrected, and the absolute log-prob differences'
sum and largest value (``logprob_drift/*``: a stale or silent weight sync shows as a jump).
"""

from __future__ import annotations

import torch

from rstar2.rl.config import LossConfig


def behaviour_weights(
    old_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    rollout_ids: torch.Tensor,
    mask: torch.Tensor,
    config: LossConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The applied weight of every token (0 where ``mask`` is 0) and the ``LossStats`` sums of
    the correction; ``rollout_ids`` (same shape) says which rollout each token belongs to, for
    the sequence level."""
    mask = mask.bool()
    log_ratio = torch.where(mask, old_logprobs.detach() - behaviour_logprobs, 0.0)
    mismatch_k3 = torch.where(mask, log_ratio.exp() - 1 - log_ratio, 0.0)
    drift = log_ratio.abs()
    if config.behaviour_correction_level == "sequence":
        log_ratio = rollout_mean(log_ratio, rollout_ids, mask)
    ratio = log_ratio.exp()
    cap = config.behaviour_correction_cap
    if config.behaviour_correction == "truncate":
        corrected = ratio > cap
        weights = ratio.clamp(max=cap)
    elif config.behaviour_correction == "mask":
        corrected = (ratio > cap) | (ratio < 1 / cap)
        weights = torch.where(corrected, 0.0, ratio)
    else:
        corrected = torch.zeros_like(mask)
        weights = torch.ones_like(ratio)
    weights = torch.where(mask, weights, 0.0)
    return weights, {
        "behaviour_weight_sum": float(weights.sum()),
        "behaviour_weight_max": float(weights[mask].max()) if mask.any() else 0.0,
        "behaviour_corrected": float((corrected & mask).sum()),
        "mismatch_k3_sum": float(mismatch_k3.sum()),
        "drift_abs_sum": float(drift.sum()),
        "drift_abs_max": float(drift.max()) if drift.numel() else 0.0,
    }


def rollout_mean(values: torch.Tensor, rollout_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Every token's value replaced by the mean over its rollout's tokens inside ``mask``."""
    if values.numel() == 0:
        return values
    ids = rollout_ids.long().flatten()
    inside = mask.flatten().to(values.dtype)
    totals = torch.zeros(int(ids.max()) + 1, dtype=values.dtype, device=values.device)
    sums = totals.index_add(0, ids, values.flatten() * inside)
    sizes = totals.index_add(0, ids, inside)
    return (sums / sizes.clamp(min=1))[ids].view_as(values)
