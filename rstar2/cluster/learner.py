"""``DistributedLearner``: the ``Learner`` of the trainer's step, with the policy sharded over
``cluster.learner.ranks`` Ray actors (``rstar2.cluster.rank``), so the step does not change.

    learner = DistributedLearner(job, settings, engine)   # ClusterJob, LearnerSettings; after ray.init()
    state = learner.restore(resume=True)
    stats, grad_norm = learner.learn(sequences)
    await learner.push_weights()                            # by the sync cluster.weight_sync picks
    learner.save(step, data_position)
    learner.export(tokenizer, run_dir / "final")            # a plain model directory

The ranks are placed by a Ray placement group (one bundle per rank: its CPUs and, on a GPU
cluster, one GPU; packed onto as few nodes as the cluster allows). Every call is sent to all
ranks at once, as their collectives need. The engine always holds its own copy of the weights,
so the ranks recompute the old log-probs before updating, exactly as ``LocalLearner`` does for
such an engine, and the updated weights are identical to the single-process learner's up to
float summation order.

It is the ``weights.wire.WeightSource``: a direct sync (``cluster.weight_strategies``)
has rank 0 form a group with the members and send over it, and ``catch_up`` (the fleet's
``on_replaced``) sends the current weights to a member the fleet has just replaced.

Checkpoints keep ``rstar2.training.checkpoint``'s layout and atomicity (a temporary directory
renamed into ``step_*``, the newest ``keep_last`` kept): the ranks write their DCP shards into
it, the driver adds its RNG state and ``state.json``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import ray
import torch

from rstar2.cluster.config import ClusterJob
from rstar2.cluster.plan import check_learner_options, weight_sync_method
from rstar2.cluster.weight_strategies import WeightSync
from rstar2.cluster.weight_sync import open_weight_sync
from rstar2.engines.base import TrainableEngine
from rstar2.rl.learner import LearnerSettings
from rstar2.rl.loss import LossStats
from rstar2.training.checkpoint import (
    TrainingState,
    latest_checkpoint,
    resolve_checkpoint,
    rng_state,
    set_rng_state,
    write_checkpoint,
)
from rstar2.weights.wire import Manifest


class DistributedLearner:
    """See the module docstring."""

    def __init__(self, job: ClusterJob, settings: LearnerSettings, engine: TrainableEngine):
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from rstar2.cluster.rank import LearnerRank

        check_learner_options(job.name, job.model, job.rl)
        self.job, self.settings, self.engine = job, settings, engine
        self.sync: WeightSync | None = None
        self.sync_seconds: list[float] = []
        self.checkpoints = settings.checkpoints
        learner = job.cluster.learner
        gpus = 1 if job.cluster.gpus_per_node else 0
        bundle = {"CPU": learner.cpus_per_rank, **({"GPU": gpus} if gpus else {})}
        self.group = placement_group([bundle] * learner.ranks, strategy="PACK")
        ray.get(self.group.ready())
        self.ranks = [
            ray.remote(LearnerRank).options(
                num_cpus=learner.cpus_per_rank, num_gpus=gpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, i),
            ).remote(job.model, settings, learner.backend, i, learner.ranks, learner.cpus_per_rank)
            for i in range(learner.ranks)]
        address, port = ray.get(self.ranks[0].endpoint.remote())
        self.on_all("join", address, port)

    def on_all(self, method: str, *args) -> list[Any]:
        """Call ``method`` on every rank at once (a collective) and wait for all. The ranks
        are Ray actor handles, whose remote methods are reached by name."""
        return ray.get([getattr(rank, method).remote(*args) for rank in self.ranks])

    def restore(self, resume: bool) -> TrainingState | None:
        latest = latest_checkpoint(self.checkpoints) if resume else None
        if latest is not None:
            self.on_all("load", str(latest))
            set_rng_state(torch.load(latest / "rng.pt", weights_only=True))
            saved = json.loads((latest / "state.json").read_text())
            return TrainingState(step=saved["step"], data_position=saved["data_position"])
        init = self.settings.init
        if init.checkpoint is not None and (resolve_checkpoint(init.checkpoint) / "sharded").is_dir():
            self.on_all("load", str(resolve_checkpoint(init.checkpoint)), not init.reset_optimizer)
        return None

    def learning_rate(self) -> float:
        return ray.get(self.ranks[0].learning_rate.remote())

    def learn(self, sequences) -> tuple[LossStats | None, float | None]:
        """The sharded update, every rank given the same sequences; rank 0's answer (the stats
        are summed over the ranks)."""
        if not sequences:
            return None, None
        return self.on_all("learn", ray.put(list(sequences)))[0]

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole policy, gathered from the shards (rank 0's answer)."""
        return self.on_all("full_state_dict")[0]

    async def push_weights(self, version: int | None = None) -> None:
        """Through the weight sync the placement chose (``rstar2.cluster.weight_sync``), opened
        at the first push, when the engine's members are up."""
        if self.sync is None:
            self.sync = open_weight_sync(weight_sync_method(self.job), self, self.engine)
        self.sync_seconds.append(await self.sync.push(version))

    async def catch_up(self, member) -> None:
        """The current weights to a member the fleet has just replaced (the fleet's
        ``on_replaced``), by the sync; before the first push there is nothing to send."""
        if self.sync is not None:
            await self.sync.catch_up(member)

    # ------------------------------------------------- weights.wire.WeightSource
    async def weight_manifest(self) -> Manifest:
        return await self.ranks[0].weight_manifest.remote()

    async def weight_endpoint(self) -> tuple[str, int]:
        return tuple(await self.ranks[0].endpoint.remote())

    async def join_weight_group(self, address: str, port: int, size: int) -> None:
        await self.ranks[0].join_weight_group.remote(address, port, size)

    async def broadcast_weights(self, bucket_bytes: int) -> None:
        await asyncio.gather(*[rank.broadcast_weights.remote(bucket_bytes) for rank in self.ranks])

    async def open_transfer(self, address: str, port: int, world: int, client) -> None:
        await asyncio.gather(*[rank.open_transfer.remote(address, port, world, client)
                               for rank in self.ranks])

    async def send_transfer(self) -> None:
        await asyncio.gather(*[rank.send_transfer.remote() for rank in self.ranks])

    def save(self, step: int, data_position: dict[str, Any]) -> Path:
        """An atomic checkpoint of ``step``: shards from the ranks, RNG and position from here."""
        files = {"rng.pt": rng_state(), "state.json": {"step": step, "data_position": data_position}}
        return write_checkpoint(self.checkpoints, step, files, self.settings.keep_last,
                                fill=lambda temp: self.on_all("save", str(temp)))

    def wait_saved(self) -> None:
        """Nothing to wait for: ``save`` returns once the ranks' shards are on disk."""

    def export(self, tokenizer, target: Path, card=None) -> Path:
        """The trained policy as a plain transformers directory (``rstar2 chat --model``),
        with ``card`` (``rstar2.agent.card``) beside it."""
        from rstar2.training.policy import load_policy, save_policy

        model = load_policy(self.job.model.model_copy(update={"gradient_checkpointing": False}))
        model.load_state_dict(self.full_state_dict())
        return save_policy(model, tokenizer, target, card)

    def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        self.on_all("close")
        for rank in self.ranks:
            ray.kill(rank)
        remove_placement_group(self.group)
