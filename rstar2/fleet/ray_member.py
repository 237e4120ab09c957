"""``RayMember``: an ``HFEngine`` inside a Ray actor (``pip install -e '.[ray]'``).

Ray places the actor (on this machine or any node of the cluster ``ray.init`` joined) and
tells the fleet when it dies: a call on a dead actor raises ``RayActorError``, which the member
turns into ``MemberDown``. ``restart`` replaces the dead actor with a fresh one built from the
same settings; the fleet then hands it the current weights (the last it pushed, or through its
``on_replaced``, when a learner sends weights to the members directly).

A ``RayMember`` is a ``weights.BroadcastReceiver``: its actor joins learner rank 0's gloo group
and loads what rank 0 broadcasts (``cluster.weight_strategies.GlooBroadcast``), so the weights never
pass through the driver.

The actor is asynchronous (its ``generate`` is a coroutine), so many trajectories' turns run
in it at once and its engine batches them, as in this process.
"""

from __future__ import annotations

from collections.abc import Mapping

from rstar2.engines.base import Completion, EngineLoad, SamplingParams
from rstar2.fleet.members import MemberDown
from rstar2.weights.wire import Manifest, checksum, open_group, receive


class EngineActor:
    """What runs inside the actor: one ``HFEngine``."""

    def __init__(self, settings: dict, threads: int):
        import torch

        from rstar2.engines.hf import HFEngine, HFEngineConfig

        torch.set_num_threads(threads)
        self.engine = HFEngine(HFEngineConfig(**settings))

    async def generate(self, prompts: list[list[int]], params: dict) -> list[dict]:
        completions = await self.engine.generate(prompts, SamplingParams(**params))
        return [c.model_dump() for c in completions]

    def load(self) -> dict:
        return self.engine.load().model_dump()

    async def update_weights(self, state_dict: Mapping, version: int | None = None) -> None:
        await self.engine.update_weights(state_dict, version)

    async def pause(self, mode: str) -> None:
        await self.engine.pause(mode)

    async def resume(self) -> None:
        await self.engine.resume()

    def reseed(self, seed: int) -> None:
        self.engine.reseed(seed)

    def pid(self) -> int:
        import os

        return os.getpid()

    def join_weight_group(self, address: str, port: int, rank: int, size: int) -> None:
        """Join the group learner rank 0 broadcasts weights in (``cluster.weight_strategies``)."""
        self.weight_group = open_group(address, port, rank, size)

    async def receive_weights(self, manifest: list, bucket_bytes: int, version: int | None = None
                              ) -> None:
        """Take one broadcast of the weights from learner rank 0 and load it as ``version``."""
        await self.engine.update_weights(receive(self.weight_group, manifest, bucket_bytes), version)

    def weights_checksum(self) -> str:
        """sha256 of this engine's weights, to check a sync bitwise."""
        return checksum(self.engine.model.state_dict())


class RayMember:
    """A fleet member whose engine lives in a Ray actor; see the module docstring.
    ``actor_class`` is what runs in the actor (``EngineActor``, or ``VLLMActor`` for vLLM),
    built as ``actor_class(settings, threads)``; ``ray_options`` go to ``.options`` of the
    actor (e.g. ``num_gpus``, ``scheduling_strategy``)."""

    actor_class = EngineActor

    def __init__(self, settings: Mapping, name: str = "ray", threads: int = 1,
                 num_cpus: float = 1.0, **ray_options):
        import ray

        if not ray.is_initialized():
            raise RuntimeError("RayMember needs a Ray cluster: call ray.init() first")
        self.settings, self.name, self.threads = dict(settings), name, threads
        self.options = {"num_cpus": num_cpus, **ray_options}
        self.actor = self.spawn()

    def spawn(self):
        import ray

        actor_class = ray.remote(self.actor_class).options(**self.options, max_concurrency=1024)
        return actor_class.remote(self.settings, self.threads)

    async def call(self, method: str, *args):
        import ray

        try:
            return await getattr(self.actor, method).remote(*args)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
            raise MemberDown(f"{self.name}: actor died: {exc}") from exc

    async def generate(self, prompts, params: SamplingParams) -> list[Completion]:
        rows = await self.call("generate", [list(p) for p in prompts], params.model_dump())
        return [Completion(**row) for row in rows]

    async def load(self) -> EngineLoad:
        return EngineLoad(**await self.call("load"))

    async def update_weights(self, state_dict: Mapping, version: int | None = None) -> None:
        await self.call("update_weights", dict(state_dict), version)

    async def pause(self, mode: str) -> None:
        await self.call("pause", mode)

    async def release_cache(self) -> None:
        """The actor's memory is its own process's (its cache goes with the next weights)."""

    async def resume(self) -> None:
        await self.call("resume")

    def reseed(self, seed: int) -> None:
        self.actor.reseed.remote(seed)

    # ------------------------------------------------- weights.BroadcastReceiver
    async def join_weight_group(self, address: str, port: int, rank: int, size: int) -> None:
        await self.call("join_weight_group", address, port, rank, size)

    async def receive_weights(self, manifest: Manifest, bucket_bytes: int,
                              version: int | None = None) -> None:
        await self.call("receive_weights", manifest, bucket_bytes, version)

    async def weights_checksum(self):
        """The actor's checksum of its engine's weights (``weights.checksum``)."""
        return await self.call("weights_checksum")

    async def pid(self) -> int:
        return await self.call("pid")

    async def restart(self) -> bool:
        """Replace the dead actor with a new one and wait until its engine is loaded."""
        import ray

        ray.kill(self.actor, no_restart=True)
        self.actor = self.spawn()
        await self.actor.pid.remote()
        return True

    async def close(self) -> None:
        import ray

        ray.kill(self.actor, no_restart=True)
