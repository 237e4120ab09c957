"""Supervised fine-tuning on agent conversations: cross-entropy on the assistant's tokens only.

    losses = sft_train(model, sequences, SFTSettings(epochs=1, lr=2e-4), pad_id)
    optimizer, scheduler = sft_optimizer(model, settings)          # to checkpoint and resume:
    sft_train(model, sequences, settings, pad_id, start_step=k, optimizer=optimizer, scheduler=scheduler)

The loss of a batch is the mean negative log-likelihood over its loss-mask tokens (what the
assistant wrote); prompt and tool-response tokens are context only, exactly as in RL, and the
sequences are the agent's own token ids, so nothing is re-tokenised between SFT and RL.
Micro-batching (``rl.batch``) and AdamW with linear warm-up (``rl.optim``) are the trainer's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from pydantic import BaseModel, Field

from rstar2.agent.trajectory import Trajectory
from rstar2.engines.device import module_device
from rstar2.rl.batch import TrainSequence, collate, micro_batches, response_logits
from rstar2.rl.config import OptimizerConfig
from rstar2.rl.loss import token_logprobs
from rstar2.rl.optim import build_optimizer, build_scheduler
from rstar2.rl.update import autocast


class SFTSettings(BaseModel):
    epochs: int = Field(1, ge=1, description="Passes over the traces.")
    batch_size: int = Field(8, ge=1, description="Traces per optimizer step.")
    lr: float = Field(2e-4, gt=0, description="AdamW learning rate after warm-up.")
    warmup_steps: int = Field(5, ge=0, description="Linear warm-up, in optimizer steps.")
    micro_batch_tokens: int = Field(2048, ge=1, description="Most padded tokens per forward pass.")
    seed: int = Field(0, description="Seeds the order of traces in each epoch.")
    compute_dtype: str = Field("float32", description="'bfloat16': mixed precision (autocast) "
                               "over the float32 weights, as the trainer's model.compute_dtype.")


def as_sequence(trajectory: Trajectory) -> TrainSequence:
    """An agent trajectory (a trace played through the agent loop) as an SFT sequence."""
    return TrainSequence(trajectory.prompt_ids, trajectory.response_ids, trajectory.loss_mask,
                         [0.0] * len(trajectory.response_ids))


def sft_optimizer(model: torch.nn.Module, settings: SFTSettings):
    """AdamW over the trainable parameters and its warm-up schedule (``rl.optim``)."""
    schedule = OptimizerConfig(lr=settings.lr, warmup_steps=settings.warmup_steps)
    optimizer = build_optimizer(model.parameters(), schedule)
    return optimizer, build_scheduler(optimizer, schedule)


def sft_batches(count: int, settings: SFTSettings) -> list[list[int]]:
    """The indices of the sequences of every optimizer step, all epochs: each epoch a fresh
    seeded permutation cut into ``batch_size`` pieces. A function of the seed alone, so a
    resumed run takes the very batches the interrupted one would have."""
    rng = np.random.default_rng(settings.seed)
    return [[int(i) for i in order[start:start + settings.batch_size]]
            for order in (rng.permutation(count) for _ in range(settings.epochs))
            for start in range(0, count, settings.batch_size)]


def sft_train(model: torch.nn.Module, sequences: Sequence[TrainSequence], settings: SFTSettings, pad_id: int,
              on_step: Callable[[int, int, float], None] | None = None, *, start_step: int = 0,
              optimizer: torch.optim.Optimizer | None = None, scheduler=None) -> list[float]:
    """Train ``model`` on ``sequences`` from optimizer step ``start_step`` on (with the
    ``optimizer`` and ``scheduler`` of ``sft_optimizer``, restored by the caller, or new ones);
    returns the loss of every step taken. ``on_step(step, total, loss)`` is called after each
    one (progress, metrics, checkpoints)."""
    if optimizer is None:
        optimizer, scheduler = sft_optimizer(model, settings)
    batches = sft_batches(len(sequences), settings)
    model.train()
    losses = []
    for step in range(start_step + 1, len(batches) + 1):
        losses.append(sft_step(model, optimizer, [sequences[i] for i in batches[step - 1]], settings, pad_id))
        scheduler.step()
        if on_step is not None:
            on_step(step, len(batches), losses[-1])
    return losses


def sft_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: list[TrainSequence],
             settings: SFTSettings, pad_id: int) -> float:
    """One optimizer step on ``batch``: token-mean NLL over its loss tokens, accumulated over
    micro-batches, gradients clipped at norm 1."""
    tokens = sum(s.loss_tokens for s in batch)
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for part in micro_batches(batch, settings.micro_batch_tokens):
        tensors = collate(part, pad_id, module_device(model))
        with autocast(model, settings.compute_dtype):
            logits = response_logits(model, tensors)
        logprobs = token_logprobs(logits, tensors.response_ids, 1.0)
        loss = -torch.where(tensors.loss_mask.bool(), logprobs, 0.0).sum() / tokens
        loss.backward()
        total += float(loss.detach())
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    return total
