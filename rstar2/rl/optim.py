"""AdamW with a linear warm-up to a constant learning rate (report §4.3).

    optimizer = build_optimizer(model.parameters(), config.rl.optimizer)
    scheduler = build_scheduler(optimizer, config.rl.optimizer)   # scheduler.step() once per update

Update k (0-based) uses lr · min(1, (k + 1) / warmup_steps): the first update already moves
(a schedule starting at 0, like transformers' constant-with-warm-up, would spend a whole rollout
step, 16K rollouts at paper scale, on an update of size zero), and update ``warmup_steps - 1``
reaches the full rate, which then stays constant.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.optim.lr_scheduler import LambdaLR

from rstar2.rl.config import OptimizerConfig


def build_optimizer(params: Iterable[torch.nn.Parameter], config: OptimizerConfig) -> torch.optim.AdamW:
    """AdamW over the trainable ``params``."""
    trainable = [p for p in params if p.requires_grad]
    return torch.optim.AdamW(
        trainable, lr=config.lr, betas=config.betas, eps=config.eps, weight_decay=config.weight_decay
    )


def build_scheduler(optimizer: torch.optim.Optimizer, config: OptimizerConfig) -> LambdaLR:
    """Linear warm-up over ``warmup_steps`` updates, then constant."""
    warmup = config.warmup_steps
    return LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / warmup) if warmup else 1.0)
