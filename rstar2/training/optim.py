"""AdamW with a linear warm-up, then a constant learning rate (report §4.3) or a cosine decay.

    optimizer = build_optimizer(model.parameters(), config.rl.optimizer)
    scheduler = build_scheduler(optimizer, config.rl.optimizer, total_updates)   # step() per update

Update k (0-based) uses lr · min(1, (k + 1) / warmup_steps): the first update already moves
(a schedule starting at 0, like transformers' constant-with-warm-up, would spend a whole rollout
step, 16K rollouts at paper scale, on an update of size zero), and update ``warmup_steps - 1``
reaches the full rate. ``schedule`` 'constant' (the paper's) keeps it there. 'cosine' then
decays it along half a cosine, lr · (r + (1 - r) · (1 + cos(π · p)) / 2) with r =
``min_lr_ratio``, p going from 0 at the last warm-up update (the full rate) to 1 at update
``total_updates - 1`` (lr · r), where it stays should the run go on. An RL step that trains
nothing (RoC dropped every group) takes no update, so a run with such steps ends a little
above lr · r.

The rate is a function of the update count alone, and the count is what a checkpoint keeps
(``scheduler.pt``), so a resumed run built with the same settings continues the curve where it
stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch.optim.lr_scheduler import LambdaLR

from rstar2.training.config import OptimizerConfig


FUSED_DEVICES = ("cpu", "cuda")
"""Devices whose fused AdamW kernel updates a parameter and its two moments in one pass: on a
CPU the default per-tensor loop makes about ten passes over each (0.47 s against 0.10 s a step
for the 135M-parameter policy, docs/benchmarks.md)."""


def build_optimizer(params: Iterable[torch.nn.Parameter], config: OptimizerConfig) -> torch.optim.AdamW:
    """AdamW over the trainable ``params``: the fused kernel where every one of them is a plain
    tensor on a device that has it (a sharded policy's DTensors take PyTorch's default)."""
    trainable = [p for p in params if p.requires_grad]
    return torch.optim.AdamW(
        trainable, lr=config.lr, betas=config.betas, eps=config.eps, weight_decay=config.weight_decay,
        fused=fusable(trainable) or None,
    )


def fusable(params: list[torch.nn.Parameter]) -> bool:
    """Whether the fused AdamW kernel takes every one of ``params``."""
    return bool(params) and all(type(p.data) is torch.Tensor and p.device.type in FUSED_DEVICES
                                and p.dtype.is_floating_point for p in params)


def build_scheduler(optimizer: torch.optim.Optimizer, config: OptimizerConfig,
                    total_updates: int | None = None) -> LambdaLR:
    """The schedule ``config`` names (module docstring); ``total_updates``, the optimizer
    updates the run plans, sets where a cosine ends and may be None for a constant one."""
    return LambdaLR(optimizer, lr_factor(config, total_updates))


def lr_factor(config: OptimizerConfig, total_updates: int | None) -> Callable[[int], float]:
    """The share of ``config.lr`` update k uses."""
    warmup = config.warmup_steps

    def warming(k: int) -> float:
        return min(1.0, (k + 1) / warmup) if warmup else 1.0

    if config.schedule == "constant":
        return warming
    if total_updates is None:
        raise ValueError("a cosine schedule needs the run's total number of optimizer updates")
    full = max(warmup, 1) - 1  # the last warm-up update, the first at the full rate
    decay = max(total_updates - 1 - full, 1)
    floor = config.min_lr_ratio

    def cosine(k: int) -> float:
        progress = min(max((k - full) / decay, 0.0), 1.0)
        return warming(k) * (floor + (1.0 - floor) * (1.0 + math.cos(math.pi * progress)) / 2)

    return cosine
