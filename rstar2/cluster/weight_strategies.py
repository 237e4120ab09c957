"""Weight sync strategies: after every update, the learner's weights reach every engine.

    sync = GatherSync(learner, engine)                   # any TrainableEngine
    sync = GroupSync(fleet, GlooBroadcast(learner))      # 'hf' Ray actor members
    sync = GroupSync(fleet, VLLMTransfer(learner))       # vLLM members (Ray or vllm serve)
    seconds = await sync.push(version)

* ``GatherSync``: the learner's full state dict (a collective over its ranks, answered by rank
  0) through this process to ``engine.update_weights``: any ``TrainableEngine``.
* ``GroupSync``: rank 0 sends straight to the fleet's live members over a group of its own
  (the weights never pass through this process), by one of two transports:
  ``GlooBroadcast`` (buckets over a gloo group, ``rstar2.weights.wire``) to
  ``BroadcastReceiver`` members, or ``VLLMTransfer`` (vLLM's own trainer-side NCCL engine on
  every learner rank, ``rstar2.fleet.vllm_transfer``) to ``TransferReceiver`` members. The
  group is formed again whenever the members that answer change (one died, or its replacement
  is up); a replaced member is caught up at once (``catch_up``, which the fleet calls through
  its ``on_replaced``) over a group of rank 0 and itself, so it never samples from the initial
  weights, and the next push forms the whole group again.

Which strategy a run uses is the placement's choice (``rstar2.cluster.weight_sync``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Protocol

from rstar2.engines.base import TrainableEngine
from rstar2.weights.wire import (
    BUCKET_BYTES,
    BroadcastReceiver,
    Manifest,
    TransferReceiver,
    WeightSource,
)


class WeightSync(Protocol):
    async def push(self, version: int | None = None) -> float:
        """Every engine holds the learner's current weights, stamped ``version`` (the learner
        step they come from), when it returns; its seconds."""
        ...

    async def catch_up(self, member) -> None:
        """The last pushed weights to a fleet member that has just replaced a dead one."""
        ...


class GatherSync:
    """Rank 0's full state dict through this process to ``engine.update_weights``."""

    def __init__(self, learner: WeightSource, engine: TrainableEngine):
        self.learner, self.engine = learner, engine

    async def push(self, version: int | None = None) -> float:
        start = time.perf_counter()
        await self.engine.update_weights(self.learner.full_state_dict(), version)
        return time.perf_counter() - start

    async def catch_up(self, member) -> None:
        """Nothing: the weights went through the fleet's ``update_weights``, and the fleet
        hands a replaced member the last ones itself."""


class Transport(Protocol):
    async def send(self, members: Sequence, version: int | None) -> None:
        """The learner's current weights to ``members`` (forming their group first if it is
        not the current one), stamped ``version``."""
        ...


class LiveMembers(Protocol):
    """What ``GroupSync`` reads from a fleet (``rstar2.fleet.Fleet``)."""

    members: list

    async def live_members(self) -> list[int]: ...


class GroupSync:
    """Rank 0 straight to the fleet's live members; see the module docstring."""

    def __init__(self, fleet: LiveMembers, transport: Transport):
        self.fleet, self.transport = fleet, transport
        self.lock = asyncio.Lock()  # one group at a time
        self.version: int | None = None  # of the weights last pushed (a catch-up sends them too)

    async def push(self, version: int | None = None) -> float:
        start = time.perf_counter()
        async with self.lock:
            self.version = version
            live = await self.fleet.live_members()  # the dead are replaced, then caught up
            await self.transport.send([self.fleet.members[index] for index in live], version)
        return time.perf_counter() - start

    async def catch_up(self, member) -> None:
        """The learner's current weights to a member that has just replaced a dead one."""
        async with self.lock:
            await self.transport.send([member], self.version)


class GlooBroadcast:
    """Buckets from learner rank 0 to ``BroadcastReceiver`` members over a gloo group of
    their own (a ``TCPStore`` rank 0 serves; no ``init_process_group``, so it lives beside the
    learner's group). Each member rebuilds the state dict from the manifest (read once)."""

    def __init__(self, source: WeightSource, bucket_bytes: int = BUCKET_BYTES):
        self.source, self.bucket_bytes = source, bucket_bytes
        self.manifest: Manifest | None = None
        self.group: list[BroadcastReceiver] = []  # the members in rank 0's current group

    async def send(self, members: Sequence[BroadcastReceiver], version: int | None) -> None:
        if not members:
            return
        if self.manifest is None:
            self.manifest = await self.source.weight_manifest()
        if list(members) != self.group:
            await self.form(members)
        try:
            await asyncio.gather(
                self.source.broadcast_weights(self.bucket_bytes),
                *[member.receive_weights(self.manifest, self.bucket_bytes, version)
                  for member in members])
        except BaseException:
            self.group = []  # a failed round leaves the group unusable: form it again
            raise

    async def form(self, members: Sequence[BroadcastReceiver]) -> None:
        """A new group of rank 0 and ``members``; each drops the one it was in."""
        address, port = await self.source.weight_endpoint()
        size = len(members) + 1
        await asyncio.gather(self.source.join_weight_group(address, port, size),
                             *[member.join_weight_group(address, port, i + 1, size)
                               for i, member in enumerate(members)])
        self.group = list(members)


class VLLMTransfer:
    """vLLM's own weight transfer from the learner ranks to ``TransferReceiver`` members: the
    trainer-side NCCL engine on every rank (rank 0 sends; the others join the gathers of each
    FSDP2 shard), the members' workers on ranks 1.. of one group, each member's after the
    previous members' (``vllm_transfer.FanOutClient``). vLLM's protocol carries no version,
    so each member is stamped after the round."""

    def __init__(self, source: WeightSource):
        self.source = source
        self.group: list[TransferReceiver] = []

    async def send(self, members: Sequence[TransferReceiver], version: int | None) -> None:
        if not members:
            return
        if list(members) != self.group:
            await self.form(members)
        try:
            await asyncio.gather(*[member.before_transfer() for member in members])
            await self.source.send_transfer()
            await asyncio.gather(*[member.after_transfer(version) for member in members])
        except BaseException:
            self.group = []
            raise

    async def form(self, members: Sequence[TransferReceiver]) -> None:
        from rstar2.fleet.vllm_transfer import FanOutClient

        if self.group:  # members of the old group that still answer leave it
            await asyncio.gather(*[member.end_weight_transfer() for member in self.group],
                                 return_exceptions=True)
            self.group = []
        workers = list(await asyncio.gather(*[member.transfer_workers() for member in members]))
        address, port = await self.source.weight_endpoint()
        client = FanOutClient([member.transfer_client() for member in members], workers)
        await self.source.open_transfer(address, port, 1 + sum(workers), client)
        self.group = list(members)
