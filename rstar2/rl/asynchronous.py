"""Asynchronous GRPO-RoC: batches sampled ahead while the learner trains (``rl.asynchronous``).

    async with SampledAhead(trainer) as batches:      # Trainer.run, when rl.asynchronous.enabled
        problems, batch = await batches.batch(step)   # ... the same step loop as ever

What changes against the synchronous loop, and what does not:

* **Batches.** Batch b is what the synchronous run would draw at step b -- the next
  ``prompts_per_step`` problems of the prompt order, each sampled 2G times with the seeds of
  step b -- but it is started as soon as the staleness bound allows, not when step b begins.
  RoC decides each group over its complete 2G rollouts, when step b trains on it.
* **The staleness bound k** (``max_staleness``). Batch b starts once the engine holds version
  b - k or later (the learner has pushed the weights of step b - k - 1): the update of step b,
  which makes version b + 1, then learns only from rollouts started under version b - k or
  later. It is enforced when a batch starts (admission), so nothing is dropped after the fact:
  a long, hard problem's group is waited for, never thrown away for going stale, which would
  bias training toward easy problems. ``within_bound`` still drops (and counts) a group whose
  oldest token is older, should one ever be (an engine that lost track of its versions). With
  k = 0 each batch starts after the previous step's push: the synchronous run.
* **Weight pushes while rollouts run.** After each update the engine is paused
  (``in_flight``: 'keep' continues the running turns under the new weights, 'abort' restarts
  them from their tokens so far), given the weights and resumed
  (``engines.base.PausableEngine``); each token keeps the version that sampled it.
* **The loss.** The learner recomputes every token's log-prob under its weights before the
  update (the proximal policy of decoupled PPO) and weights each token against the policy that
  sampled it (``rl.loss.behaviour_correction``, truncated by default): the same correction the
  synchronous run applies to its engine's other copy of the weights.
* **The learner's thread.** The update runs on a thread of its own, so the event loop goes on
  stepping the engine and serving tool and reward calls; on a CPU it takes ``learner_threads``
  of the process's threads and the engine the others, since two thread pools on the same cores
  would each wait on the other. At k = 0 nothing samples during an update, and it runs on the
  event loop's thread as in the synchronous loop.
* **Checkpoints and resume.** A checkpoint after step b records the prompt order's position
  before batch b + 1: a resumed run samples the batches that were in flight again, from the
  same problems with the same seeds, so no batch is lost and none is trained twice; what was in
  flight is in the step's metrics (``async/batches_ahead``). A rollout on a fleet member that
  dies is run again from its start, as in the synchronous loop.

Metrics (per step): ``async/staleness_mean|max`` over the trained tokens (the learner's version
minus the version that sampled each token) and ``async/staleness_share_<s>`` (the share of
tokens at each staleness s), ``roc/dropped_stale`` (groups dropped by ``within_bound``),
``async/wait_s`` and ``async/learner_idle_share`` (the learner waiting for its batch),
``async/engine_idle_share`` (the engine computing nothing, where it reports its busy time),
``async/batches_ahead`` (batches started beyond this one when it was trained). The importance
weights' mean, maximum, truncated share and mismatch KL are the loss's ``behaviour/*``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rstar2.data.problems import Problem
from rstar2.engines.base import PausableEngine
from rstar2.errors import Rstar2Error
from rstar2.rl.config import AsyncConfig
from rstar2.rl.roc import GroupDecision
from rstar2.rl.rollout import Rollout
from rstar2.rl.sampler import SampledBatch

if TYPE_CHECKING:
    from rstar2.rl.trainer import Trainer


class NotPausable(Rstar2Error, ValueError):
    """Asynchronous training asked of an engine that cannot take weights while generating."""


class SampledAhead:
    """Batches sampled ahead of the learner within the staleness bound (module docstring)."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.config: AsyncConfig = trainer.config.rl.asynchronous
        engine = trainer.sampler.engine
        if getattr(trainer.learner, "colocated", False):
            raise NotPausable("rl.asynchronous: the engine samples from the learner's own model, which "
                              "the update changes under it; give the engine its own copy (engine.dtype)")
        if not isinstance(engine, PausableEngine):
            raise NotPausable(f"rl.asynchronous: the engine ({type(engine).__name__}) cannot take "
                              "weights while it generates; use engine.kind 'hf' (or a fleet of 'hf' members)")
        self.engine = engine
        self.version = trainer.completed_steps  # the weights the engine holds
        self.admitted = asyncio.Condition()
        self.batches: dict[int, asyncio.Task] = {}
        self.positions: dict[int, dict[str, int]] = {}  # the order's position before each batch
        self.producer: asyncio.Task | None = None
        self.threads: tuple[int, int] | None = None  # (engine, learner) on a CPU
        self.waited = 0.0
        self.last_step_end = time.perf_counter()
        self.engine_busy = self.engine_busy_s()

    async def __aenter__(self) -> SampledAhead:
        self.threads = self.split_threads()
        self.producer = asyncio.create_task(self.produce(self.trainer.completed_steps),
                                            name="batches ahead")
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.producer.cancel()
        for task in self.batches.values():
            task.cancel()
        await asyncio.gather(self.producer, *self.batches.values(), return_exceptions=True)
        if self.threads is not None:
            self.engine_threads(sum(self.threads))

    # ----------------------------------------------------------------- sampling ahead
    async def produce(self, first: int) -> None:
        """Start batch after batch, each once the bound admits it, until the run's last."""
        try:
            await self.start_batches(first)
        finally:
            async with self.admitted:  # a learner waiting on a batch that will not come
                self.admitted.notify_all()

    async def start_batches(self, first: int) -> None:
        for step in range(first, self.trainer.config.rl.steps):
            async with self.admitted:
                await self.admitted.wait_for(lambda: self.version >= step - self.config.max_staleness)
                self.positions[step] = self.trainer.order.position()
                problems, seed = self.trainer.draw(step)
                self.batches[step] = asyncio.create_task(self.sample(problems, seed), name=f"batch {step}")
                self.admitted.notify_all()  # a learner waiting for this batch

    async def sample(self, problems: list[Problem], seed: int) -> tuple[list[Problem], SampledBatch]:
        return problems, await self.trainer.sampler.sample(problems, seed)

    async def batch(self, step: int) -> tuple[list[Problem], SampledBatch]:
        """Step ``step``'s batch, once all its groups have finished."""
        started = time.perf_counter()
        async with self.admitted:  # started already, unless k = 0 and the push was just now
            await self.admitted.wait_for(lambda: step in self.batches or self.producer.done())
        if step not in self.batches:
            self.producer.result()  # the producer's failure
        result = await self.batches.pop(step)
        self.waited = time.perf_counter() - started
        return result

    def within_bound(self, step: int, groups: Sequence[Sequence[Rollout]],
                     decisions: list[GroupDecision]) -> list[GroupDecision]:
        """Drop (counted in ``roc/dropped_stale``) a group with a token older than the bound."""
        oldest_allowed = step - self.config.max_staleness
        kept = []
        for group, decision in zip(groups, decisions):
            versions = [r.trajectory.weight_version for r in group if r.trajectory.weight_version is not None]
            if decision.kept and versions and min(versions) < oldest_allowed:
                decision = dataclasses.replace(decision, kept=(), dropped="stale")
            kept.append(decision)
        return kept

    # ----------------------------------------------------------------- learning beside it
    async def learn(self, sequences):
        """The update on a thread of its own, with the learner's share of the CPU threads; at
        k = 0 on this one, since nothing samples meanwhile: a second thread computing on a CPU
        brings a second OpenMP pool, and with more pool threads than cores libgomp stops
        spinning between parallel regions, which measured a third slower for every step after
        (docs/benchmarks.md, 'The decode step against its floor')."""
        if self.config.max_staleness == 0:
            return self.trainer.learner.learn(sequences)
        return await asyncio.to_thread(self.learn_on_thread, sequences)

    def learn_on_thread(self, sequences):
        if self.threads is not None:
            import torch

            torch.set_num_threads(self.threads[1])
        return self.trainer.learner.learn(sequences)

    async def push(self, version: int) -> None:
        """Pause the engine, hand it the new weights, resume it, and admit what they allow."""
        await self.engine.pause(self.config.in_flight)
        try:
            await self.trainer.learner.push_weights(version)
        finally:
            await self.engine.resume()
        async with self.admitted:
            self.version = version
            self.admitted.notify_all()

    def position(self, next_step: int) -> dict[str, int]:
        return self.positions.get(next_step, self.trainer.order.position())

    # ----------------------------------------------------------------- metrics
    def metrics(self, step: int, kept: Sequence[Rollout]) -> dict[str, float]:
        now = time.perf_counter()
        wall = max(now - self.last_step_end, 1e-9)
        self.last_step_end = now
        staleness = token_staleness(kept, step)
        metrics = {"async/wait_s": self.waited, "async/learner_idle_share": min(self.waited / wall, 1.0),
                   "async/batches_ahead": float(sum(1 for s in self.batches if s > step))}
        if staleness:
            metrics["async/staleness_mean"] = sum(staleness) / len(staleness)
            metrics["async/staleness_max"] = float(max(staleness))
            for value in range(self.config.max_staleness + 1):
                metrics[f"async/staleness_share_{value}"] = staleness.count(value) / len(staleness)
        busy = self.engine_busy_s()
        if busy is not None and self.engine_busy is not None:
            metrics["async/engine_idle_share"] = max(0.0, 1.0 - (busy - self.engine_busy) / wall)
        self.engine_busy = busy
        return metrics

    def engine_busy_s(self) -> float | None:
        """Seconds the engine has computed, where it says (an ``HFEngine``'s ``load``)."""
        load = getattr(self.engine, "load", None)
        if not callable(load):
            return None
        reading = load()
        return getattr(reading, "busy_s", None)

    def split_threads(self) -> tuple[int, int] | None:
        """(engine, learner) CPU threads, set on this thread (the engine's) now; None off a
        CPU, with one thread (then both share it) or with k = 0 (sampling and learning then
        never overlap, and each has every thread, as in the synchronous loop)."""
        import torch

        from rstar2.models.device import module_device

        if self.config.max_staleness == 0:
            return None
        model = getattr(self.trainer.learner, "model", None)
        if model is not None and module_device(model).type != "cpu":
            return None
        total = torch.get_num_threads()
        if total < 2:
            return None
        learner = min(self.config.learner_threads or max(1, total // 2), total - 1)
        self.engine_threads(total - learner)
        return total - learner, learner

    def engine_threads(self, threads: int) -> None:
        """The engine's CPU threads (on this thread): its own ceiling, where it keeps one."""
        import torch

        limit = getattr(self.engine, "limit_threads", None)  # an HFEngine's
        if limit is not None:
            limit(threads)
        else:
            torch.set_num_threads(threads)


def token_staleness(rollouts: Sequence[Rollout], step: int) -> list[int]:
    """For every trained (sampled) token of ``rollouts``: ``step`` minus the version that
    sampled it; tokens of an engine that does not stamp versions are left out."""
    out = []
    for rollout in rollouts:
        t = rollout.trajectory
        versions = t.token_versions or [t.weight_version if t.weight_version is not None else -1] * len(t.loss_mask)
        out += [step - v for v, m in zip(versions, t.loss_mask) if m and v >= 0]
    return out
