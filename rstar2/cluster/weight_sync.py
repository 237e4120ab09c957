"""Weight sync: how the learner's new weights reach the engines after every update.

    sync = open_weight_sync(method, learner, engine)
    seconds = await sync.push()

Three ways, one interface (``WeightSync.push``), chosen by placement (``cluster.weight_sync``)
and by the kind of the fleet's members:

* ``GatherSync`` ('gather'): rank 0 gathers the full state dict (a collective over the FSDP2
  ranks), the driver hands it to ``engine.update_weights``: any ``TrainableEngine``, so vLLM
  in-process (``VLLMEngine``: ``collective_rpc`` to every worker's ``load_weights``, the path
  verl and TRL use), a fleet of HTTP members (a directory they reload:
  ``/update_weights_from_disk``) or of Ray actors (through Ray's object store).
* ``BroadcastSync`` ('broadcast'): learner rank 0 and every live Ray actor member form their own
  gloo process group (a ``TCPStore`` rank 0 serves; no ``init_process_group``, so it lives
  beside the learner's group), and rank 0 broadcasts the weights in buckets of
  ``bucket_bytes``, each one flat tensor of one dtype; each member rebuilds the state dict from
  the manifest (names, shapes, dtypes, read once from rank 0) and loads it. The weights never
  pass through the driver. A member the fleet replaces gets the current weights the same way
  (``Fleet.catch_up``), and the next push forms the group again with it.
* ``VLLMTransferSync`` ('broadcast' to vLLM Ray actor members whose vLLM has native weight
  transfer, ``rstar2.cluster.vllm_sync``): vLLM's own trainer-side engine on the learner ranks
  broadcasts over NCCL to every member's workers; vLLM members without it are given the
  weights by ``GatherSync`` (``collective_rpc``).

A colocated engine (the single-process path) needs neither: ``LocalLearner`` keeps it.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from datetime import timedelta
from typing import Protocol

import torch
import torch.distributed as dist

BUCKET_BYTES = 64 * 1024 * 1024
Manifest = list[tuple[str, tuple[int, ...], str]]


class WeightSync(Protocol):
    async def push(self, version: int | None = None) -> float:
        """Every engine holds the learner's current weights, stamped ``version`` (the learner
        step they come from), when it returns; its seconds."""
        ...


def open_group(address: str, port: int, rank: int, size: int) -> dist.ProcessGroupGloo:
    """A gloo group of ``size`` processes outside the default one; rank 0 serves the store.
    Every member must call it at once: the group forms when all have joined."""
    store = dist.TCPStore(address, port, world_size=size, is_master=rank == 0,
                          timeout=timedelta(minutes=10), wait_for_workers=False)
    return dist.ProcessGroupGloo(dist.PrefixStore("weights", store), rank, size,
                                 timedelta(minutes=10))


def manifest_of(state_dict: dict[str, torch.Tensor]) -> Manifest:
    return [(name, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in state_dict.items()]


def buckets(manifest: Manifest, bucket_bytes: int) -> list[list[int]]:
    """Indices into ``manifest`` grouped by dtype, each group at most ``bucket_bytes`` (a
    tensor larger than that is a bucket of its own), in a fixed order both sides compute."""
    groups: list[list[int]] = []
    current: dict[str, tuple[list[int], int]] = {}
    for index, (_, shape, dtype) in enumerate(manifest):
        size = torch.Size(shape).numel() * torch.empty((), dtype=getattr(torch, dtype)).element_size()
        members, used = current.get(dtype, ([], 0))
        if members and used + size > bucket_bytes:
            groups.append(members)
            members, used = [], 0
        current[dtype] = (members + [index], used + size)
    return groups + [members for members, _ in current.values() if members]


def broadcast(group, flat: torch.Tensor) -> None:
    options = dist.BroadcastOptions()
    options.rootRank = 0
    group.broadcast([flat], options).wait()


def send(group, state_dict: dict[str, torch.Tensor], bucket_bytes: int) -> None:
    """Rank 0: every bucket of ``state_dict`` to the group."""
    manifest = manifest_of(state_dict)
    for bucket in buckets(manifest, bucket_bytes):
        broadcast(group, torch.cat([state_dict[manifest[i][0]].reshape(-1) for i in bucket]))


def receive(group, manifest: Manifest, bucket_bytes: int) -> dict[str, torch.Tensor]:
    """A member: the state dict rank 0 sends."""
    state = {}
    for bucket in buckets(manifest, bucket_bytes):
        shapes = [torch.Size(manifest[i][1]) for i in bucket]
        flat = torch.empty(sum(s.numel() for s in shapes), dtype=getattr(torch, manifest[bucket[0]][2]))
        broadcast(group, flat)
        for i, piece in zip(bucket, torch.split(flat, [s.numel() for s in shapes])):
            state[manifest[i][0]] = piece.view(manifest[i][1])
    return state


def checksum(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over the names and bytes of every tensor, in name order (bitwise equality)."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        digest.update(name.encode())
        digest.update(state_dict[name].detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class GatherSync:
    """Rank 0's full state dict through the driver to ``engine.update_weights``."""

    def __init__(self, learner, engine):
        self.learner, self.engine = learner, engine

    async def push(self, version: int | None = None) -> float:
        start = time.perf_counter()
        await self.engine.update_weights(self.learner.full_state_dict(), version)
        return time.perf_counter() - start


class BroadcastSync:
    """Bucketed broadcast from learner rank 0 to the fleet's Ray actor members; see the module
    docstring. The group is formed again whenever the members that answer change (one died,
    or its replacement is up), and a replaced member is caught up at once over a group of
    rank 0 and itself, so it never samples from the initial weights."""

    def __init__(self, learner, fleet, bucket_bytes: int = BUCKET_BYTES):
        import ray

        self.learner, self.fleet, self.bucket_bytes = learner, fleet, bucket_bytes
        self.manifest = ray.get(learner.ranks[0].weight_manifest.remote())
        self.group: list = []  # the actors in rank 0's current weight group
        self.lock = asyncio.Lock()  # one group at a time
        self.version: int | None = None  # of the weights last pushed (a catch-up sends them too)
        fleet.catch_up = self.catch_up

    async def push(self, version: int | None = None) -> float:
        start = time.perf_counter()
        async with self.lock:
            self.version = version
            live = await self.fleet.live_members()  # the dead are replaced, then caught up
            await self.send([self.fleet.members[index].actor for index in live])
        return time.perf_counter() - start

    async def catch_up(self, member) -> None:
        """The learner's current weights to a member that has just replaced a dead one."""
        async with self.lock:
            await self.send([member.actor])

    async def send(self, actors: list) -> None:
        if not actors:
            return
        if actors != self.group:
            await self.form(actors)
        ranks = self.learner.ranks
        await asyncio.gather(*[rank.broadcast_weights.remote(self.bucket_bytes) for rank in ranks],
                             *[actor.receive_weights.remote(self.manifest, self.bucket_bytes,
                                                            self.version)
                               for actor in actors])

    async def form(self, actors: list) -> None:
        """A new group of rank 0 and ``actors``; each drops the one it was in."""
        rank0 = self.learner.ranks[0]
        address, port = await rank0.endpoint.remote()
        size = len(actors) + 1
        await asyncio.gather(rank0.join_weight_group.remote(address, port, size),
                             *[actor.join_weight_group.remote(address, port, i + 1, size)
                               for i, actor in enumerate(actors)])
        self.group = list(actors)


def open_weight_sync(method: str, learner, engine) -> WeightSync:
    """For 'broadcast', by the kind of the fleet's members: vLLM's own weight transfer
    (``rstar2.cluster.vllm_sync``) to vLLM actors whose vLLM has it, ``GatherSync``
    (``collective_rpc``) to other vLLM members, ``BroadcastSync`` to 'hf' actors; else
    ``GatherSync``."""
    if method != "broadcast":
        return GatherSync(learner, engine)
    from rstar2.cluster.vllm_sync import VLLMTransferSync, native_transfer_members
    from rstar2.engines.fleet.vllm_member import VLLMRayMember

    members = list(getattr(engine, "members", []))
    if any(isinstance(member, VLLMRayMember) for member in members):
        native = native_transfer_members(members)
        return VLLMTransferSync(learner, native) if native else GatherSync(learner, engine)
    actors = [getattr(member, "actor", None) for member in members]
    if not actors or None in actors:
        raise ValueError("cluster.weight_sync 'broadcast' needs a fleet of Ray actor members; "
                         "use 'gather' for other engines")
    return BroadcastSync(learner, engine)
