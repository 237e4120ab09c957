"""Weight sync to vLLM members by vLLM's own weight transfer (``WeightTransferConfig``, NCCL).

    sync = VLLMTransferSync(learner, members)   # every member's vLLM joins one group
    seconds = await sync.push(version)

vLLM splits a sync between a trainer-side engine and the inference workers: the trainer builds
``WeightTransferTrainerFactory.trainer_init(NCCLTrainerInitInfo(...), client, ModuleSource)``
on every learner rank (rank 0 is the sender; the others only join the collectives that gather
each FSDP2 shard with ``full_tensor()``), and ``send_weights()`` drives the inference side
through ``client`` -- ``init_weight_transfer_engine`` once, then ``start_weight_update``,
``update_weights`` (concurrently with rank 0's broadcast) and ``finish_weight_update`` -- so
the weights go from the learner's GPUs to every member's workers without passing through the
driver or the CPU.

``MemberTransferClient`` is that client (vLLM's ``VLLMWeightSyncClient`` protocol) over the
fleet's vLLM Ray actors: every call goes to all members at once, and at the handshake each
member's workers get their own ranks in the one group (``rank_offset``: 1 for the first member,
after the previous members' workers for the next). The protocol carries no version, so after
each push the driver stamps every member with the learner step it now holds.
"""

from __future__ import annotations

import asyncio
import time

import ray


class MemberTransferClient:
    """vLLM's ``VLLMWeightSyncClient`` over several vLLM actors; see the module docstring."""

    def __init__(self, actors: list, workers: list[int]):
        self.actors, self.workers = actors, workers

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        before = [sum(self.workers[:i]) for i in range(len(self.actors))]
        ray.get([actor.init_weight_transfer_engine.remote(
                    {**init_info, "rank_offset": init_info["rank_offset"] + offset})
                 for actor, offset in zip(self.actors, before)])

    def start_weight_update(self) -> None:
        ray.get([actor.start_weight_update.remote() for actor in self.actors])

    def update_weights(self, update_info: dict) -> None:
        ray.get([actor.receive_weight_update.remote(update_info) for actor in self.actors])

    def finish_weight_update(self) -> None:
        ray.get([actor.finish_weight_update.remote() for actor in self.actors])


class VLLMTransferSync:
    """vLLM's native weight transfer from the learner ranks to vLLM Ray actor members."""

    def __init__(self, learner, members: list):
        self.learner, self.members = learner, members
        actors = [member.actor for member in members]
        workers = ray.get([actor.transfer_workers.remote() for actor in actors])
        address, port = ray.get(learner.ranks[0].endpoint.remote())
        client = MemberTransferClient(actors, workers)
        learner.on_all("open_vllm_transfer", address, port, 1 + sum(workers), client)

    async def push(self, version: int | None = None) -> float:
        start = time.perf_counter()
        await asyncio.gather(*[rank.send_vllm_weights.remote() for rank in self.learner.ranks])
        await asyncio.gather(*[member.set_weight_version(version) for member in self.members])
        return time.perf_counter() - start


def native_transfer_members(members: list) -> list | None:
    """``members`` when all are vLLM Ray actors whose vLLM has native weight transfer; None
    otherwise (then weights go through the engine's ``update_weights``: ``collective_rpc``)."""
    from rstar2.engines.fleet.vllm_member import VLLMRayMember

    if not all(isinstance(m, VLLMRayMember) for m in members):
        return None
    native = ray.get([member.actor.native_weight_transfer.remote() for member in members])
    return members if all(native) else None
