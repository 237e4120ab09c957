"""``VLLMRayMember``: a ``VLLMEngine`` inside a Ray actor, placed on one node with its GPUs.

Each member gets its own Ray placement group of one bundle (its GPUs and CPU cores): a bundle
never spans nodes, so a tensor-parallel member's GPUs are on one machine, and a replaced
member comes back into the same reservation. The actor holds all of the bundle's GPUs; vLLM
starts its tensor-parallel workers as local processes (``distributed_executor_backend="mp"``)
over the GPUs Ray gave the actor, so it never asks Ray for more.

The actor serves what ``RayMember`` calls (generate, load from vLLM's own gauges, weights by
``collective_rpc``) plus vLLM's native weight-transfer steps, which the learner's weight sync
(``rstar2.cluster.vllm_sync``) drives while it broadcasts.
"""

from __future__ import annotations

from collections.abc import Mapping

from rstar2.engines.fleet.ray_member import EngineActor, RayMember

PLACEMENT_TIMEOUT_S = 300


class VLLMActor(EngineActor):
    """What runs inside the actor: one ``VLLMEngine`` (``settings`` are its arguments)."""

    def __init__(self, settings: dict, threads: int):
        import torch

        from rstar2.engines.vllm import VLLMEngine

        torch.set_num_threads(threads)
        self.engine = VLLMEngine(**settings)

    def native_weight_transfer(self) -> bool:
        """Whether this vLLM takes weights by its own transfer engine."""
        return self.engine.native_transfer

    def transfer_workers(self) -> int:
        return self.engine.transfer_workers()

    async def init_weight_transfer_engine(self, init_info: dict) -> None:
        await self.engine.init_weight_transfer_engine(init_info)

    async def start_weight_update(self) -> None:
        await self.engine.start_weight_update()

    async def receive_weight_update(self, update_info: dict) -> None:
        await self.engine.receive_weight_update(update_info)

    async def finish_weight_update(self) -> None:
        await self.engine.finish_weight_update()

    def set_weight_version(self, version: int | None) -> None:
        self.engine.set_weight_version(version)

    async def weights_checksum(self) -> list[str]:
        """sha256 of each worker's model weights, in vLLM's own parameter layout (fused
        projections), so comparable with another vLLM member of the same parallelism."""
        return await self.engine.llm.collective_rpc(worker_checksum)


def worker_checksum(worker) -> str:
    """Runs inside each vLLM worker."""
    from rstar2.cluster.weight_sync import checksum

    return checksum(worker.model_runner.model.state_dict())


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

    async def set_weight_version(self, version: int | None) -> None:
        await self.call("set_weight_version", version)

    async def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        await super().close()
        remove_placement_group(self.group)
