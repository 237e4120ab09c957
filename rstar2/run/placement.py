"""Where a run's parts live: the ``Placement`` protocol, and ``LocalPlacement`` (this process).

    placement = LocalPlacement(config)                      # or rstar2.cluster's RayPlacement
    final_dir = await run_training(config, placement)       # rstar2.run.training

``run_training`` asks a placement, in this order, to ``check`` the run (before anything is
written), then to open the sandboxes, the engine and the learner into the run's exit stack
(which closes them in reverse when the run ends, however it ends), and at the end to
``export`` the trained policy. Whatever is not placement -- the tokenizer, the problems, the
grader, the sampler and the step loop -- is the same for every placement.

``LocalPlacement`` keeps everything in this process (CPU or one GPU): the policy, a
``LocalLearner`` around it, the engine ``engine:`` names (colocated 'hf' samples from the
policy itself; with ``engine.dtype`` it holds its own copy; ``engine.members`` make a fleet),
and the ``sandbox.urls`` services or a private local one. A caller that already holds a policy,
an engine or a sandbox (the demo: one policy through SFT, RL and evaluations) hands them in;
what is handed in is used as it is and left open for its owner.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from rstar2.agent.card import ModelCard
from rstar2.engines.base import TrainableEngine
from rstar2.fleet.rollout_engine import open_rollout_engine
from rstar2.models.device import module_device
from rstar2.rl.learner import Learner, LearnerSettings, LocalLearner
from rstar2.run.config import RunConfig
from rstar2.sandbox import local_sandbox
from rstar2.training.policy import load_policy, save_policy


@runtime_checkable
class Placement(Protocol):
    """Where the sandboxes, the engine and the learner of a run live."""

    def check(self) -> None:
        """Refuse, before anything starts or is written, a run this placement cannot hold."""
        ...

    def open_sandboxes(self, stack: AsyncExitStack) -> list[str]:
        """The URLs of the sandbox services the tool calls go to (started ones are closed by
        ``stack``)."""
        ...

    def check_sandboxes(self) -> None:
        """After a call found no sandbox: raise an error naming what is gone, if the services
        this placement started are why; else return."""
        ...

    def open_engine(self, tokenizer, stack: AsyncExitStack) -> TrainableEngine:
        """The engine the rollouts are sampled from."""
        ...

    def open_learner(self, engine: TrainableEngine, settings: LearnerSettings,
                     stack: AsyncExitStack) -> Learner:
        """The learner that holds and trains the policy and pushes its weights to ``engine``."""
        ...

    def export(self, learner: Learner, tokenizer, target: Path, card: ModelCard) -> Path:
        """The trained policy as a plain model directory at ``target``, with ``card``."""
        ...


class LocalPlacement:
    """Everything in this process; see the module docstring."""

    def __init__(self, config: RunConfig, *, model: torch.nn.Module | None = None,
                 engine: TrainableEngine | None = None, sandbox_urls: list[str] | None = None):
        self.config = config
        self.model = model
        self.engine = engine
        self.sandbox_urls = list(sandbox_urls or config.sandbox.urls)

    def check(self) -> None:
        """A vLLM engine or member without vLLM installed (``ImportError``, one line naming
        the extra); the config's own checks have refused the rest."""
        engine = self.config.engine
        kinds = {member.kind for member in engine.members} if engine.members else {engine.kind}
        if "vllm" in kinds and self.engine is None:
            from rstar2.engines.vllm import import_vllm

            import_vllm()

    def open_sandboxes(self, stack: AsyncExitStack) -> list[str]:
        """The services handed in or listed in ``sandbox.urls``, else a private local one."""
        if self.sandbox_urls:
            return self.sandbox_urls
        return [stack.enter_context(local_sandbox(workers=self.config.sandbox.workers,
                                                  timeout_s=self.config.rollout.tool_timeout_s))]

    def check_sandboxes(self) -> None:
        """A private sandbox fails the call that found it gone; nothing more to name."""

    def open_engine(self, tokenizer, stack: AsyncExitStack) -> TrainableEngine:
        if self.engine is None:
            self.engine = rollout_engine(self.config, self.policy(), tokenizer)
            stack.push_async_callback(self.engine.close)
        return self.engine

    def open_learner(self, engine: TrainableEngine, settings: LearnerSettings,
                     stack: AsyncExitStack) -> LocalLearner:
        """The policy in this process (nothing to close: the trainer waits for its last
        checkpoint)."""
        return LocalLearner(settings, self.policy(), engine)

    def export(self, learner: Learner, tokenizer, target: Path, card: ModelCard) -> Path:
        return save_policy(self.policy(), tokenizer, target, card)

    def policy(self) -> torch.nn.Module:
        """The policy handed in, else ``model:``'s, loaded once."""
        if self.model is None:
            self.model = load_policy(self.config.model)
        return self.model


def rollout_engine(config: RunConfig, model: torch.nn.Module | None, tokenizer) -> TrainableEngine:
    """The engine ``engine:`` names for a run in this process: 'hf' samples from ``model``
    itself, or from its own copy of the weights in ``engine.dtype`` (filled by the first
    weight push) on ``engine.device``, by default the model's device; ``engine.members`` make
    a fleet over them, scheduled by ``engine.scheduler``."""
    engine = config.engine
    colocated = engine.kind == "hf" and engine.dtype is None and model is not None
    device = engine.device if engine.dtype is not None else None
    if device is None and model is not None:
        device = str(module_device(model))
    return open_rollout_engine(
        engine, model=config.model.path, model_dtype=config.model.dtype, seed=config.seed,
        tokenizer=tokenizer, shared_model=model if colocated else None, device=device or "auto",
        max_batch_size=rollout_batch_size(config))


def rollout_batch_size(config: RunConfig) -> int:
    """Sequences the run's engine decodes together: every rollout of a step at once. A client
    that shares the engine (the demo's held-out evaluation) keeps no more than this in flight,
    so the next turn of a sample is never queued behind new prompts while its cached keys are
    evicted."""
    return config.rl.prompts_per_step * config.rl.rollouts_per_prompt
