"""``VLLMRayMember``: a ``VLLMEngine`` inside a Ray actor, placed on one node with its GPUs.

Each member gets its own Ray placement group of one bundle (its GPUs and CPU cores): a bundle
never spans nodes, so a tensor-parallel member's GPUs are on one machine, and a replaced
member comes back into the same reservation. The actor holds all of the bundle's GPUs; vLLM
starts its tensor-parallel workers as local processes (``distributed_executor_backend="mp"``)
over the GPUs Ray gave the actor, so it never asks Ray for more.

The actor serves what ``RayMember`` calls (generate, load from vLLM's own gauges, a state dict
by ``update_weights``: shared memory to vLLM's workers) plus vLLM's native weight transfer: the
member is a ``weights.TransferReceiver``, whose ``transfer_client`` (an ``ActorTransferClient``,
plain and picklable) lets a learner rank drive vLLM's handshake and rounds on the actor
(``cluster.weight_strategies.VLLMTransfer``).
"""

from __future__ import annotations

from collections.abc import Mapping

from rstar2.fleet.ray_member import EngineActor, RayMember

PLACEMENT_TIMEOUT_S = 300


class VLLMActor(EngineActor):
    """What runs inside the actor: one ``VLLMEngine`` (``settings`` are its arguments)."""

    def __init__(self, settings: dict, threads: int):
        import torch

        from rstar2.engines.vllm import VLLMEngine

        torch.set_num_threads(threads)
        self.engine = VLLMEngine(**settings)

    def transfer_workers(self) -> int:
        return self.engine.transfer_workers()

    async def init_weight_transfer_engine(self, init_info: dict) -> None:
        await self.engine.init_weight_transfer_engine(init_info)

    async def start_weight_update(self) -> None:
        await self.engine.start_weight_update()

    async def receive_weight_update(self, update_info: dict | list[dict]) -> None:
        await self.engine.receive_weight_update(update_info)

    async def finish_weight_update(self) -> None:
        await self.engine.finish_weight_update()

    async def end_weight_transfer(self) -> None:
        await self.engine.end_weight_transfer()

    async def weights_loaded(self, version: int | None) -> None:
        await self.engine.weights_loaded(version)

    async def weight_digests(self) -> list[dict[str, str]]:
        return await self.engine.weight_digests()


class ActorTransferClient:
    """vLLM's ``VLLMWeightSyncClient`` over one ``VLLMActor`` (blocking calls; it travels to
    the learner rank that drives the transfer)."""

    def __init__(self, actor):
        self.actor = actor

    def call(self, method: str, *args):
        import ray

        return ray.get(getattr(self.actor, method).remote(*args))

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self.call("init_weight_transfer_engine", init_info)

    def start_weight_update(self) -> None:
        self.call("start_weight_update")

    def update_weights(self, update_info: dict | list[dict]) -> None:
        self.call("receive_weight_update", update_info)

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        """(The version is stamped by ``after_transfer``, which knows the learner's step.)"""
        self.call("finish_weight_update")


class VLLMRayMember(RayMember):
    """A fleet member running vLLM in a Ray actor with ``gpus`` GPUs on one node (its
    ``tensor_parallel_size``; 0 on a CPU cluster, where only a stand-in can run)."""

    actor_class = VLLMActor

    def __init__(self, settings: Mapping, name: str, gpus: int, cpus: int = 1):
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        settings = dict(settings)
        if gpus > 1:
            settings.setdefault("tensor_parallel_size", gpus)
            settings.setdefault("distributed_executor_backend", "mp")
        bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
        self.group = placement_group([bundle], strategy="STRICT_PACK")
        ready, _ = ray.wait([self.group.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            remove_placement_group(self.group)
            raise RuntimeError(f"{name}: no Ray node has {gpus} GPU(s) and {cpus} CPU(s) free "
                               f"(waited {PLACEMENT_TIMEOUT_S} s)")
        super().__init__(settings, name=name, threads=cpus, num_cpus=cpus, num_gpus=gpus,
                         scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, 0))

    # ------------------------------------------------- weights.TransferReceiver
    async def transfer_workers(self) -> int:
        return await self.call("transfer_workers")

    def transfer_client(self) -> ActorTransferClient:
        return ActorTransferClient(self.actor)

    async def before_transfer(self) -> None:
        """Nothing to do: the engine takes no request during a push."""

    async def after_transfer(self, version: int | None) -> None:
        await self.call("weights_loaded", version)

    async def end_weight_transfer(self) -> None:
        await self.call("end_weight_transfer")

    async def weight_digests(self) -> list[dict[str, str]]:
        """vLLM's per-parameter sha256 of each of the member's workers."""
        return await self.call("weight_digests")

    async def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        await super().close()
        remove_placement_group(self.group)
