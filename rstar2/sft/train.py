"""Supervised fine-tuning on agent conversations: cross-entropy on the assistant's tokens only.

    settings, note = resolve_sft_dtype(SFTSettings(epochs=1, lr=2e-4), model)   # 'auto' made concrete
    losses = sft_train(model, sequences, settings)
    steps = len(sft_batches(len(sequences), settings))           # the optimizer steps of all epochs
    optimizer, scheduler = sft_optimizer(model, settings, steps)   # to checkpoint and resume:
    sft_train(model, sequences, settings, start_step=k, optimizer=optimizer, scheduler=scheduler)

The loss of an optimizer step is the mean negative log-likelihood over the loss-mask tokens of
its traces (what the assistant wrote); prompt and tool-response tokens are context only,
exactly as in RL, and the sequences are the agent's own token ids, so nothing is re-tokenised
between SFT and RL.

Speed (docs/benchmarks.md has the measurements behind each choice): the traces of a step are
packed end to end into rows of at most ``micro_batch_tokens`` tokens with no padding, one row a
forward pass (``rstar2.training.packing``: each trace attends only to itself, the opening all
traces share, the system prompt, is computed once per row, and the LM head runs only where a
trained token is predicted). ``compute_dtype`` 'auto' is bfloat16 autocast on machines whose CPU
computes in bfloat16 and float32 elsewhere (``rstar2.models.dtype_choice``).
``freeze_embeddings`` keeps the input embeddings (tied to the LM head in the small models)
fixed. AdamW with linear warm-up (then constant or cosine) is the one RL trains with
(``rstar2.training.optim``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from rstar2.agent.trajectory import Trajectory
from rstar2.models.device import module_device
from rstar2.models.dtype_choice import ModelShapes, resolve_dtype
from rstar2.sft.config import SFTSettings
from rstar2.training.batch import TrainSequence
from rstar2.training.config import OptimizerConfig
from rstar2.training.optim import build_optimizer, build_scheduler
from rstar2.training.packing import pack_rows, packed_attention, packed_nll
from rstar2.training.precision import autocast


def as_sequence(trajectory: Trajectory) -> TrainSequence:
    """An agent trajectory (a trace played through the agent loop) as an SFT sequence."""
    return TrainSequence(trajectory.prompt_ids, trajectory.response_ids, trajectory.loss_mask,
                         [0.0] * len(trajectory.response_ids))


def resolve_sft_dtype(settings: SFTSettings, model: torch.nn.Module) -> tuple[SFTSettings, str]:
    """``settings`` with compute_dtype 'auto' made concrete for ``model`` on its device, and the
    line saying so ('' when it was not 'auto')."""
    choice = resolve_dtype(settings.compute_dtype, "train", module_device(model),
                           lambda: ModelShapes.from_config(model.config))
    if choice is None:
        return settings, ""
    return settings.model_copy(update={"compute_dtype": choice.dtype}), choice.note("SFT compute dtype")


def sft_optimizer(model: torch.nn.Module, settings: SFTSettings, total_steps: int | None = None):
    """AdamW over the trainable parameters and its schedule (``rstar2.training.optim``), which
    a cosine ends at ``total_steps`` (``len(sft_batches(...))``); with ``freeze_embeddings``
    the input embeddings stop being trainable first."""
    if settings.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    schedule = OptimizerConfig(lr=settings.lr, warmup_steps=settings.warmup_steps,
                               schedule=settings.schedule, min_lr_ratio=settings.min_lr_ratio)
    optimizer = build_optimizer(model.parameters(), schedule)
    return optimizer, build_scheduler(optimizer, schedule, total_steps)


def sft_batches(count: int, settings: SFTSettings) -> list[list[int]]:
    """The indices of the sequences of every optimizer step, all epochs: each epoch a fresh
    seeded permutation cut into ``batch_size`` pieces. A function of the seed alone, so a
    resumed run takes the very batches the interrupted one would have."""
    rng = np.random.default_rng(settings.seed)
    return [[int(i) for i in order[start:start + settings.batch_size]]
            for order in (rng.permutation(count) for _ in range(settings.epochs))
            for start in range(0, count, settings.batch_size)]


def sft_train(model: torch.nn.Module, sequences: Sequence[TrainSequence], settings: SFTSettings,
              on_step: Callable[[int, int, float], None] | None = None, *, start_step: int = 0,
              optimizer: torch.optim.Optimizer | None = None, scheduler=None) -> list[float]:
    """Train ``model`` on ``sequences`` from optimizer step ``start_step`` on (with the
    ``optimizer`` and ``scheduler`` of ``sft_optimizer``, restored by the caller, or new ones);
    returns the loss of every step taken. ``on_step(step, total, loss)`` is called after each
    one (progress, metrics, checkpoints). ``settings.compute_dtype`` must be concrete
    (``resolve_sft_dtype``)."""
    if settings.compute_dtype == "auto":
        raise ValueError("SFTSettings.compute_dtype 'auto' must be resolved first (resolve_sft_dtype)")
    batches = sft_batches(len(sequences), settings)
    if optimizer is None:
        optimizer, scheduler = sft_optimizer(model, settings, len(batches))
    model.train()
    losses = []
    for step in range(start_step + 1, len(batches) + 1):
        losses.append(sft_step(model, optimizer, [sequences[i] for i in batches[step - 1]], settings))
        scheduler.step()
        if on_step is not None:
            on_step(step, len(batches), losses[-1])
    return losses


def sft_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: list[TrainSequence],
             settings: SFTSettings) -> float:
    """One optimizer step on ``batch``: token-mean NLL over its loss tokens, accumulated over
    packed rows (the model attends per sequence for the step, as before after it), gradients
    clipped at norm 1."""
    tokens = sum(s.loss_tokens for s in batch)
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    with packed_attention(model):
        for row in pack_rows(batch, settings.micro_batch_tokens):
            with autocast(model, settings.compute_dtype):
                loss = packed_nll(model, row) / tokens
            loss.backward()
            total += float(loss.detach())
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    return total
