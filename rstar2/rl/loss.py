"""The GRPO-RoC policy loss (report Eq. 6): PPO-clip with Clip-Higher, token-level mean.

    loss, stats = policy_loss(logprobs, old_logprobs, advantages, loss_mask, config, token_count)

Shapes: ``logprobs``/``old_logprobs``/``loss_mask`` ``[batch, tokens]`` (response tokens of each
rollout, padded), ``advantages`` ``[batch]`` (one per rollout, see ``advantage``). Per token,
with ratio ρ = exp(logprob - old_logprob) and advantage A,

    objective = min(ρ·A, clip(ρ, 1 - clip_low, 1 + clip_high)·A)

and the loss is -Σ objective over tokens with ``loss_mask`` 1, divided by ``token_count``: the
number of loss tokens of *all* kept rollouts of the update, so that micro-batches whose losses
are backpropagated one after another add up to the paper's token-level mean (DAPO style, not a
per-sequence mean). Tokens with mask 0 (tool responses, padding) contribute nothing, not even
NaN, whatever their log-probs hold.

Options, both off by default as in the paper: ``kl_coef`` adds β·k3(π_θ ‖ π_ref) per token
(k3 = e^(ref - logprob) - (ref - logprob) - 1, GRPO's estimator; needs ``ref_logprobs``);
``entropy_coef`` subtracts c·entropy per token (needs ``entropy``). Entropy passed with a zero
coefficient is only measured. ``behaviour`` (the engine's sampled log-probs, where the engine
holds another copy of the weights) multiplies each token's objective by its importance weight
against the engine's policy (``rstar2.rl.correction``; ``LossConfig.behaviour_correction``).

``LossStats`` carries sums, so the trainer adds the stats of its micro-batches and reads
clip fractions, entropy and KL as token means of the whole update.

What the loss consumes from logits (each token's log-prob, its entropy) comes from
``rstar2.training.vocab``, under the engines' convention (softmax of logits / temperature), so
ρ is 1 when nothing has changed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from rstar2.rl.config import LossConfig
from rstar2.rl.correction import behaviour_weights


@dataclass(frozen=True)
class Behaviour:
    """The log-probs the engine sampled the tokens with, where they differ from ``old_logprobs``
    (the trainer's recomputation), and which rollout each token belongs to (for sequence-level
    weights); both shaped like ``old_logprobs``. See ``rstar2.rl.correction``."""

    logprobs: torch.Tensor
    rollout_ids: torch.Tensor


@dataclass
class LossStats:
    """Sums over loss tokens; add micro-batches with ``+``, read means with ``summary()``."""

    tokens: float = 0.0
    policy_loss_sum: float = 0.0
    clipped_low: float = 0.0
    clipped_high: float = 0.0
    ratio_sum: float = 0.0
    entropy_sum: float | None = None
    kl_sum: float | None = None
    behaviour_weight_sum: float | None = None
    behaviour_weight_max: float | None = None
    behaviour_corrected: float | None = None
    mismatch_k3_sum: float | None = None
    drift_abs_sum: float | None = None
    drift_abs_max: float | None = None

    def __add__(self, other: LossStats) -> LossStats:
        def combine(name: str, a: float | None, b: float | None) -> float | None:
            if a is None or b is None:
                return b if a is None else a
            return max(a, b) if name.endswith("_max") else a + b

        return LossStats(**{f.name: combine(f.name, getattr(self, f.name), getattr(other, f.name))
                            for f in fields(self)})

    def summary(self) -> dict[str, float]:
        """Token means: policy loss, clip fractions (low = ratio under 1 - clip_low with A < 0,
        high = over 1 + clip_high with A > 0, i.e. where the clip removed the gradient), mean
        ratio, and entropy / KL when they were computed; ``behaviour/*`` and ``logprob_drift/*``
        (the engine's sampled log-probs against the trainer's) where the engine sampled from
        another copy of the weights."""
        n = max(self.tokens, 1.0)
        means = {
            "loss/tokens": self.tokens,
            "loss/policy": self.policy_loss_sum / n,
            "loss/clip_fraction": (self.clipped_low + self.clipped_high) / n,
            "loss/clip_fraction_low": self.clipped_low / n,
            "loss/clip_fraction_high": self.clipped_high / n,
            "loss/ratio_mean": self.ratio_sum / n,
        }
        if self.entropy_sum is not None:
            means["loss/entropy"] = self.entropy_sum / n
        if self.kl_sum is not None:
            means["loss/kl"] = self.kl_sum / n
        if self.behaviour_weight_sum is not None:
            means.update({
                "behaviour/weight_mean": self.behaviour_weight_sum / n,
                "behaviour/weight_max": self.behaviour_weight_max,
                "behaviour/corrected_share": self.behaviour_corrected / n,
                "behaviour/mismatch_kl": self.mismatch_k3_sum / n,
                "logprob_drift/mean": self.drift_abs_sum / n,
                "logprob_drift/max": self.drift_abs_max,
            })
        return means


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: LossConfig,
    token_count: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    behaviour: Behaviour | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The loss to backpropagate for this micro-batch and its stats (module docstring)."""
    mask = loss_mask.bool()
    if token_count is None:
        token_count = float(mask.sum())
    if token_count <= 0:
        raise ValueError("token_count must be positive: the update has no loss tokens")
    log_ratio = torch.where(mask, logprobs - old_logprobs, 0.0)
    ratio = log_ratio.exp()
    advantage = advantages.to(ratio.dtype)[:, None].expand_as(ratio)
    clipped_ratio = ratio.clamp(1 - config.clip_low, 1 + config.clip_high)
    objective = torch.minimum(ratio * advantage, clipped_ratio * advantage)
    correction: dict[str, float] = {}
    if behaviour is not None:
        weights, correction = behaviour_weights(old_logprobs, behaviour.logprobs, behaviour.rollout_ids,
                                                mask, config)
        objective = objective * weights
    per_token = torch.where(mask, -objective, 0.0)
    stats = LossStats(
        **correction,
        tokens=float(mask.sum()),
        policy_loss_sum=float(per_token.detach().sum()),
        clipped_low=float((mask & (advantage < 0) & (ratio < 1 - config.clip_low)).sum()),
        clipped_high=float((mask & (advantage > 0) & (ratio > 1 + config.clip_high)).sum()),
        ratio_sum=float(torch.where(mask, ratio.detach(), 0.0).sum()),
    )
    if config.kl_coef > 0 or ref_logprobs is not None:
        kl = masked_k3(logprobs, ref_logprobs, mask, config.kl_coef)
        stats.kl_sum = float(kl.detach().sum())
        per_token = per_token + config.kl_coef * kl
    if config.entropy_coef > 0 or entropy is not None:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the per-token entropy")
        entropy = torch.where(mask, entropy, 0.0)
        stats.entropy_sum = float(entropy.detach().sum())
        per_token = per_token - config.entropy_coef * entropy
    return per_token.sum() / token_count, stats


def masked_k3(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None, mask: torch.Tensor, kl_coef: float
) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_θ ‖ π_ref), zero where masked."""
    if ref_logprobs is None:
        raise ValueError(f"kl_coef={kl_coef} needs the reference policy's log-probs")
    delta = torch.where(mask, ref_logprobs - logprobs, 0.0)
    return torch.where(mask, delta.exp() - delta - 1, 0.0)
