"""One optimizer update from a set of kept rollouts: micro-batches, gradient accumulation, clip.

    stats, grad_norm = policy_update(model, optimizer, scheduler, sequences, update_config)

Every micro-batch's loss is divided by the loss tokens of *all* ``sequences`` (``policy_loss``'s
``token_count``), so accumulating their gradients gives the token-level mean of Eq. 6 over the
whole update, whatever the micro-batch size. Log-probs are taken at the rollout temperature, the
distribution the tokens were sampled from, so the ratio is 1 before the first update.

A micro-batch is one packed row (``rstar2.training.packing``): its sequences end to end without
padding, the prompt opening they share computed once, and the LM head only where a sampled
token is predicted (not on prompts, tool responses or padding); the loss sees the loss tokens
in row order, each with its own old log-prob and its sequence's advantage.

``recompute_logprobs`` re-scores sequences under the current weights without gradients: the old
log-probs when the policy moved since sampling (a later mini-batch of the same step), and the
reference log-probs of the KL option. Where the engine sampled from its own copy of the weights
(``with_engine_logprobs``), those are the behaviour log-probs, against which the loss weights each
token (``rstar2.rl.correction``) and measures their drift; the old log-probs are then the
trainer's at the step's weights: with one update a step, the update's own forward pass, detached
(``old_from_forward``), which spares a second pass over the batch; with several,
``with_current_logprobs`` recomputes them before the first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rstar2.rl.config import LossConfig
from rstar2.rl.loss import Behaviour, LossStats, policy_loss
from rstar2.training.batch import TrainSequence, micro_batches
from rstar2.training.packing import PackedRow, pack_row, packed_attention, trained_logits
from rstar2.training.precision import autocast
from rstar2.training.vocab import token_entropy, token_entropy_differentiable, token_logprobs


@dataclass(frozen=True)
class UpdateSettings:
    """What an update needs besides the model and the data."""

    loss: LossConfig
    temperature: float
    micro_batch_tokens: int
    max_grad_norm: float
    compute_dtype: str = "float32"
    """'bfloat16': forward and backward under ``torch.autocast`` (mixed precision)."""


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    sequences: Sequence[TrainSequence],
    settings: UpdateSettings,
    reference: torch.nn.Module | None = None,
    old_from_forward: bool = False,
) -> tuple[LossStats, float]:
    """Backpropagate the GRPO-RoC loss of ``sequences`` and step the optimizer once; returns
    the summed loss stats and the gradient norm before clipping. ``old_from_forward``: the old
    log-probs are this pass's own, detached (the weights have not moved since the engine
    sampled), not the sequences' ``old_logprobs``."""
    token_count = float(sum(s.loss_tokens for s in sequences))
    stats = LossStats()
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with packed_attention(model):
        for batch in micro_batches(sequences, settings.micro_batch_tokens):
            loss, batch_stats = micro_batch_loss(model, batch, token_count, settings, reference,
                                                 old_from_forward)
            loss.backward()
            stats = stats + batch_stats
            del loss
    return stats, float(clip_and_step(model, optimizer, scheduler, settings.max_grad_norm))


def old_logprobs_source(sequences: list[TrainSequence], updates: int, sampled_here: bool,
                        recompute: Callable[[list[TrainSequence]], list[TrainSequence]]
                        ) -> tuple[list[TrainSequence], bool]:
    """Where a step's old log-probs come from, and the sequences ready for it; the bool says
    whether the update takes them from its own forward pass (``old_from_forward``). Shared by
    the single-process and the sharded learner. Where the engine sampled from this very model
    (``sampled_here``), the sampled ones. Else the engine's become the behaviour log-probs and
    the old ones are the trainer's: with one update a step, the update's own forward pass (the
    weights have not moved since sampling, and a second pass over the batch is spared); with
    several, ``recompute`` (``with_current_logprobs`` or its sharded form) before the first."""
    if sampled_here:
        return sequences, False
    if updates == 1:
        return with_engine_logprobs(sequences), True
    return recompute(sequences), False


def updates_over_parts(sequences: Sequence[TrainSequence], updates: int,
                       update: Callable[[list[TrainSequence]], tuple[LossStats, float]]
                       ) -> tuple[LossStats | None, float]:
    """Split ``sequences`` into ``updates`` consecutive parts and run ``update`` on each (one
    optimizer update a part); the summed loss stats and the mean gradient norm. Shared by the
    single-process and the sharded learner, so both cut the step the same way."""
    stats, norms = None, []
    for part in np.array_split(np.arange(len(sequences)), updates):
        if len(part) == 0:
            continue
        part_stats, norm = update([sequences[i] for i in part])
        stats = part_stats if stats is None else stats + part_stats
        norms.append(norm)
    return stats, float(np.mean(norms))


def clip_and_step(model: torch.nn.Module, optimizer, scheduler, max_grad_norm: float) -> torch.Tensor:
    """Clip the accumulated gradients, step the optimizer and the schedule, and clear the
    gradients; the norm before clipping (a sharded policy's norm is a DTensor) is returned."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm


def micro_batch_loss(
    model: torch.nn.Module,
    batch: Sequence[TrainSequence],
    token_count: float,
    settings: UpdateSettings,
    reference: torch.nn.Module | None = None,
    old_from_forward: bool = False,
) -> tuple[torch.Tensor, LossStats]:
    """The loss of one micro-batch, already divided by the whole update's ``token_count``
    (so micro-batch gradients sum to Eq. 6's token mean), and its stats. Called inside
    ``packed_attention(model)``, and its backward pass must run there too: a checkpointed layer
    (``model.gradient_checkpointing``) computes its forward again during the backward pass,
    which must attend per sequence as the first one did."""
    row = pack_row(batch)
    ref = row_logprobs(reference, row, settings)[:, None] if reference is not None else None
    with autocast(model, settings.compute_dtype):
        logits, targets = trained_logits(model, row)
    logprobs = token_logprobs(logits, targets, settings.temperature)[:, None]
    members = [batch[i] for i in row.sources]
    old = logprobs.detach() if old_from_forward else loss_token_values(members, lambda s: s.old_logprobs,
                                                                         logprobs.device)
    advantages = loss_token_values(members, lambda s: [s.advantage] * len(s.loss_mask), logprobs.device)[:, 0]
    return policy_loss(logprobs, old, advantages, torch.ones_like(old, dtype=torch.bool), settings.loss,
                       token_count=token_count, ref_logprobs=ref, entropy=batch_entropy(logits, settings)[:, None],
                       behaviour=row_behaviour(members, logprobs.device))


def loss_token_values(members: Sequence[TrainSequence], values: Callable[[TrainSequence], Sequence[float]],
                      device: torch.device) -> torch.Tensor:
    """``values`` of each sequence at its loss tokens, in row order, as a ``[tokens, 1]`` column."""
    return torch.tensor([v for s in members for v, m in zip(values(s), s.loss_mask) if m],
                        dtype=torch.float32, device=device)[:, None]


def row_behaviour(members: Sequence[TrainSequence], device: torch.device) -> Behaviour | None:
    """The engine's log-probs of the row's loss tokens when the trainer recomputed the old ones
    (weighted as ``LossConfig.behaviour_correction`` says, measured even when 'off'); None when
    the engine sampled from the trainer's own weights."""
    if any(s.behaviour_logprobs is None for s in members):
        return None
    rollout_ids = torch.tensor([i for i, s in enumerate(members) for m in s.loss_mask if m], device=device)
    return Behaviour(loss_token_values(members, lambda s: s.behaviour_logprobs, device), rollout_ids[:, None])


def batch_entropy(logits: torch.Tensor, settings: UpdateSettings) -> torch.Tensor:
    """Per-token entropy: only measured (no gradient) unless the loss has an entropy term."""
    if settings.loss.entropy_coef > 0:
        return token_entropy_differentiable(logits, settings.temperature)
    return token_entropy(logits, settings.temperature)


@torch.no_grad()
def row_logprobs(model: torch.nn.Module, row: PackedRow, settings: UpdateSettings) -> torch.Tensor:
    """Log-probs of ``row``'s loss tokens, in row order, under ``model``'s current weights."""
    was_training = model.training
    model.eval()
    with packed_attention(model), autocast(model, settings.compute_dtype):
        logits, targets = trained_logits(model, row)
    model.train(was_training)
    return token_logprobs(logits, targets, settings.temperature)


def recompute_logprobs(model: torch.nn.Module, sequences: Sequence[TrainSequence], settings: UpdateSettings
                       ) -> list[list[float]]:
    """Log-probs of the response tokens of ``sequences`` (one micro-batch) under ``model``'s
    current weights, per sequence in the given order (0.0 where the loss mask is 0)."""
    row = pack_row(sequences)
    values = iter(row_logprobs(model, row, settings).tolist())
    fresh: list[list[float]] = [[] for _ in sequences]
    for index in row.sources:
        fresh[index] = [next(values) if m else 0.0 for m in sequences[index].loss_mask]
    return fresh


def with_current_logprobs(
    model: torch.nn.Module, sequences: Sequence[TrainSequence], settings: UpdateSettings
) -> list[TrainSequence]:
    """``sequences`` (reordered by length) with their old log-probs replaced by the current
    policy's, the sampled ones kept as their behaviour log-probs."""
    result = []
    for batch in micro_batches(sequences, settings.micro_batch_tokens):
        fresh = recompute_logprobs(model, batch, settings)
        result += [rescored(sequence, values) for sequence, values in zip(batch, fresh)]
    return result


def with_engine_logprobs(sequences: Sequence[TrainSequence]) -> list[TrainSequence]:
    """``sequences`` with their sampled log-probs as the behaviour log-probs, for an update
    whose old log-probs are its own forward pass (``policy_update(old_from_forward=True)``)."""
    return [dataclasses.replace(s, behaviour_logprobs=s.old_logprobs) for s in sequences]


def rescored(sequence: TrainSequence, fresh: list[float]) -> TrainSequence:
    """``sequence`` with the trainer's recomputed log-probs as its old ones, keeping the engine's
    as the behaviour log-probs the loss corrects against."""
    behaviour = sequence.behaviour_logprobs if sequence.behaviour_logprobs is not None else sequence.old_logprobs
    return dataclasses.replace(sequence, old_logprobs=fresh, behaviour_logprobs=behaviour)
