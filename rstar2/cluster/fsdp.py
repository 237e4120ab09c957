"""The policy sharded with FSDP2 and the update of Eq. 6 split over its ranks.

    shard_policy(model, mesh, compute_dtype="bfloat16")
    stats, grad_norm = sharded_update(model, optimizer, scheduler, sequences, settings, mesh)

``shard_policy`` applies ``torch.distributed.fsdp.fully_shard`` to every decoder layer and then
to the root (embedding, output head, final norm), with mixed precision (bf16 compute, float32
gradient reduction) when ``compute_dtype`` is bf16, and activation checkpointing when the
policy was loaded with it. Every micro-batch's loss is already divided by the token count of
the whole update, so the gradients must be *summed* over ranks; FSDP averages them, so each
rank's loss is scaled by the world size (a power of two or a small integer: exact in float, and
gloo has no pre-multiplied reduction that a divide factor of 1 would need).

``sharded_update`` splits the update's micro-batches (``rstar2.training.batch.micro_batches``,
the same ones the single-process learner builds) round-robin over the ranks. Every FSDP forward is
a collective, so all ranks must run the same number: a rank with fewer real micro-batches runs
the update's first micro-batch with weight 0, which gathers the same layers and adds nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from rstar2.rl.loss import LossStats
from rstar2.rl.update import UpdateSettings, clip_and_step, micro_batch_loss, recompute_logprobs, rescored
from rstar2.training.batch import TrainSequence, micro_batches
from rstar2.training.packing import packed_attention
from rstar2.training.policy import activations_checkpointed, checkpoint_activations


def shard_policy(model: torch.nn.Module, mesh: DeviceMesh, compute_dtype: str) -> torch.nn.Module:
    """Shard ``model`` in place over ``mesh``: one FSDP unit per decoder layer, then the root."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if compute_dtype == "bfloat16" else MixedPrecisionPolicy()
    if activations_checkpointed(model):
        checkpoint_activations(model, use_reentrant=False)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def decoder_layers(model: torch.nn.Module) -> Sequence[torch.nn.Module]:
    """The repeated blocks of a transformers decoder (``model.model.layers``: Llama, Qwen)."""
    layers = getattr(getattr(model, "model", None), "layers", None)  # a transformers layout, or not
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no model.layers to shard")
    return list(layers)


def rank_batches(batches: list, rank: int, world: int) -> list[tuple[object, float]]:
    """This rank's micro-batches with their weights, padded to the same count on every rank
    with the first micro-batch at weight 0 (see the module docstring)."""
    mine = batches[rank::world]
    rounds = math.ceil(len(batches) / world)
    return [(b, 1.0) for b in mine] + [(batches[0], 0.0)] * (rounds - len(mine))


def sharded_update(model, optimizer, scheduler, sequences: Sequence[TrainSequence],
                   settings: UpdateSettings, mesh: DeviceMesh,
                   old_from_forward: bool = False) -> tuple[LossStats, float]:
    """One optimizer update of ``sequences`` over all ranks (each rank passes all of them);
    the summed stats of every rank and the global gradient norm before clipping.
    ``old_from_forward`` as in ``rstar2.rl.update.policy_update``."""
    rank, world = mesh.get_local_rank(), mesh.size()
    token_count = float(sum(s.loss_tokens for s in sequences))
    batches = micro_batches(sequences, settings.micro_batch_tokens)
    stats = LossStats()
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with packed_attention(model):  # the backward pass too: checkpointed layers recompute there
        for batch, weight in rank_batches(batches, rank, world):
            loss, batch_stats = micro_batch_loss(model, batch, token_count, settings,
                                                 old_from_forward=old_from_forward)
            (loss * (weight * world)).backward()  # FSDP averages over ranks; Eq. 6 sums
            if weight:
                stats = stats + batch_stats
            del loss
    grad_norm = clip_and_step(model, optimizer, scheduler, settings.max_grad_norm)
    return sum_over_ranks(stats, world), float(full(grad_norm))


def sharded_logprobs(model, sequences: Sequence[TrainSequence], settings: UpdateSettings,
                     mesh: DeviceMesh) -> list[TrainSequence]:
    """``rstar2.rl.update.with_current_logprobs`` over the ranks: the same reordered sequences
    with the current policy's log-probs, each rank scoring its share of the micro-batches."""
    rank, world = mesh.get_local_rank(), mesh.size()
    batches = micro_batches(sequences, settings.micro_batch_tokens)
    scored = {}
    for batch, weight in rank_batches(list(range(len(batches))), rank, world):
        fresh = recompute_logprobs(model, batches[batch], settings)
        if weight:
            scored[batch] = fresh
    gathered: list[dict | None] = [None] * world
    dist.all_gather_object(gathered, scored)
    everything = {k: v for part in gathered for k, v in part.items()}
    return [rescored(s, everything[b][row])
            for b, batch in enumerate(batches) for row, s in enumerate(batch)]


def sum_over_ranks(stats: LossStats, world: int) -> LossStats:
    gathered: list[LossStats | None] = [None] * world
    dist.all_gather_object(gathered, stats)
    return sum(gathered[1:], gathered[0])


def full(value: torch.Tensor) -> torch.Tensor:
    """A DTensor's global value (the gradient norm over all shards); a plain tensor as is."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value  # torch's DTensor
