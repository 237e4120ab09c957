"""The learning half of a training step: the policy's weights and everything that changes them.

    learner = LocalLearner(settings, model, engine)   # settings: LearnerSettings
    state = learner.restore(resume=True)          # TrainingState of the checkpoint, or None
    stats, grad_norm = learner.learn(sequences)    # the step's optimizer updates
    await learner.push_weights()                   # the engine samples the new policy
    learner.save(step, data_position)              # an atomic checkpoint, written in the background
    learner.wait_saved()                           # ... and on disk

``Learner`` is the contract the trainer's step is written against; ``LocalLearner`` meets it
with the policy in this process (CPU or one GPU): AdamW with its warm-up schedule, the
optional KL reference, checkpoints through ``rstar2.training.checkpoint`` (written on a
background thread, so the next step's rollouts do not wait for the disk), and weight pushes to one
``TrainableEngine``. A learner whose policy is sharded over many processes (FSDP2) meets the
same contract, so the step does not change when the learner does.

Colocation: when the engine samples from this very model, the sampled log-probs are the old
policy's and a weight push only drops the engine's stale caches; otherwise the engine holds its
own copy, the push sends the state dict, the old log-probs are the trainer's at the step's
weights (the update's own forward pass with one update a step, recomputed before the first of
several), and the loss weights each token against the engine's sampling policy and measures how
far the two are apart (``rstar2.rl.correction``: ``behaviour/*``, ``logprob_drift/*``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from rstar2.engines.base import TrainableEngine
from rstar2.models.memory import return_freed_memory
from rstar2.rl.config import InitConfig
from rstar2.rl.loss import LossStats
from rstar2.rl.update import (
    UpdateSettings,
    old_logprobs_source,
    policy_update,
    updates_over_parts,
    with_current_logprobs,
)
from rstar2.training.batch import TrainSequence
from rstar2.training.checkpoint import (
    CheckpointWriter,
    TrainingState,
    latest_checkpoint,
    load_checkpoint,
    resolve_checkpoint,
)
from rstar2.training.config import OptimizerConfig
from rstar2.training.optim import build_optimizer, build_scheduler


@dataclass(frozen=True)
class LearnerSettings:
    """What a learner needs besides the policy and the engine, cut from the run config once
    (``rstar2.run.settings``) and the same for the local and the distributed learner."""

    update: UpdateSettings
    """The update's loss, temperature, micro-batches, clipping, padding and compute dtype."""
    optimizer: OptimizerConfig
    """AdamW and its warm-up schedule."""
    init: InitConfig
    """Where the policy starts when the run has no checkpoint of its own."""
    updates_per_step: int
    """Optimizer updates per rollout batch."""
    total_updates: int
    """Optimizer updates the run plans (``rl.steps`` x ``updates_per_step``): where a cosine
    schedule ends."""
    checkpoints: Path
    """The run's checkpoint directory (absolute: ranks on other nodes write into it)."""
    keep_last: int
    """Complete checkpoints kept; older ones are deleted after a new one lands."""


@runtime_checkable
class Learner(Protocol):
    """What the trainer's step needs from whatever holds and trains the policy."""

    def restore(self, resume: bool) -> TrainingState | None:
        """Load the run's latest checkpoint when ``resume`` and one exists (weights, optimizer,
        schedule, RNGs; its ``TrainingState`` is returned), else start from ``rl.init``
        (None is returned). Builds the KL reference when the loss uses one."""
        ...

    def learning_rate(self) -> float:
        """The learning rate the next update will use."""
        ...

    def learn(self, sequences: list[TrainSequence]) -> tuple[LossStats | None, float | None]:
        """The step's optimizer updates over ``sequences``; their summed loss stats and mean
        gradient norm, or (None, None) when there is nothing to learn from."""
        ...

    async def push_weights(self, version: int | None = None) -> None:
        """Hand the current weights to the engine that samples the next step, as ``version``
        (the steps they have learned from): the engine stamps its completions with it."""
        ...

    def save(self, step: int, data_position: dict[str, Any]) -> Path:
        """Checkpoint ``step`` (with the trainer's ``data_position``); its path. The files may
        still be being written when it returns (``wait_saved``)."""
        ...

    def wait_saved(self) -> None:
        """Block until every checkpoint ``save`` started is on disk; raise a failed write's error."""
        ...


class LocalLearner:
    """The policy in this process; see the module docstring."""

    def __init__(self, settings: LearnerSettings, model: torch.nn.Module, engine: TrainableEngine):
        self.settings = settings
        self.model = model
        self.engine = engine
        self.colocated = engine.samples_from(model)
        self.optimizer = build_optimizer(model.parameters(), settings.optimizer)
        self.scheduler = build_scheduler(self.optimizer, settings.optimizer, settings.total_updates)
        self.reference: torch.nn.Module | None = None
        self.writer = CheckpointWriter(settings.checkpoints, keep_last=settings.keep_last)

    def restore(self, resume: bool) -> TrainingState | None:
        if self.settings.update.loss.kl_coef > 0:
            self.reference = self.reference_policy()
        latest = latest_checkpoint(self.settings.checkpoints) if resume else None
        if latest is not None:
            return load_checkpoint(latest, self.model, self.optimizer, self.scheduler)
        init = self.settings.init
        if init.checkpoint is not None:
            keep_optimizer = not init.reset_optimizer  # stage 3 resets it
            load_checkpoint(resolve_checkpoint(init.checkpoint), self.model,
                            self.optimizer if keep_optimizer else None,
                            self.scheduler if keep_optimizer else None, restore_rng=False)
        return None

    def reference_policy(self) -> torch.nn.Module:
        """The KL reference: ``model.path``'s weights, or with ``init.reset_reference`` the
        stage's starting checkpoint. Built from the policy before any checkpoint is loaded
        into it, so a resumed run gets the same reference as the run it continues."""
        reference = copy.deepcopy(self.model)
        init = self.settings.init
        if init.checkpoint is not None and init.reset_reference:
            load_checkpoint(resolve_checkpoint(init.checkpoint), reference, restore_rng=False)
        reference.eval().requires_grad_(False)
        return reference

    def learning_rate(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def learn(self, sequences: list[TrainSequence]) -> tuple[LossStats | None, float | None]:
        """``updates_per_step`` optimizer updates (mini-batches); (None, None) when RoC left
        nothing to learn from (the step is skipped, as in the release)."""
        if not sequences:
            return None, None
        sequences, old_from_forward = old_logprobs_source(
            sequences, self.settings.updates_per_step, sampled_here=self.colocated,
            recompute=lambda them: with_current_logprobs(self.model, them, self.settings.update))
        result = updates_over_parts(
            sequences, self.settings.updates_per_step,
            lambda part: policy_update(self.model, self.optimizer, self.scheduler, part,
                                       self.settings.update, self.reference, old_from_forward))
        return_freed_memory()  # the activations: the rollouts next do not reuse them
        return result

    async def push_weights(self, version: int | None = None) -> None:
        """A colocated engine already reads the weights and only drops the keys/values the
        previous ones computed; another copy is loaded. The model is left in eval mode, the
        mode a colocated engine samples in (no dropout)."""
        await self.engine.update_weights({} if self.colocated else self.model.state_dict(), version)
        self.model.eval()

    def save(self, step: int, data_position: dict[str, Any]) -> Path:
        return self.writer.submit(step, self.model, self.optimizer, self.scheduler, data_position)

    def wait_saved(self) -> None:
        self.writer.wait()
