"""Weight transport: how a learner's weights reach the engines that sample from them.

This module owns the pieces every sync strategy (``rstar2.cluster.weight_strategies``) is built from,
and the two small protocols at the boundary:

* ``WeightSource`` -- what a learner offers (``rstar2.cluster.learner.DistributedLearner``): its
  full state dict, and, for a direct sync, a rank 0 that forms a group with the members
  and sends over it (a gloo broadcast of buckets, or vLLM's own trainer-side transfer engine);
* ``WeightReceiver`` -- what a fleet member offers to receive them directly
  (``BroadcastReceiver``: an 'hf' Ray actor member joins rank 0's gloo group;
  ``TransferReceiver``: a vLLM member joins vLLM's NCCL weight transfer).

The transport itself: a manifest (names, shapes, dtypes, read once), fixed-size buckets of one
dtype each, a gloo group outside the default process group (so it lives beside the learner's),
and checksums that compare two copies bitwise (``checksum`` over a whole state dict, and
``digests``, one sha256 per parameter the way vLLM's ``compute_weight_checksums`` reports
them).
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist

BUCKET_BYTES = 64 * 1024 * 1024
GROUP_TIMEOUT = timedelta(minutes=10)
Manifest = list[tuple[str, tuple[int, ...], str]]
"""(name, shape, dtype name) of every tensor of a state dict, in the order it is sent."""


def manifest_of(state_dict: dict[str, torch.Tensor]) -> Manifest:
    return [(name, tuple(t.shape), dtype_name(t.dtype)) for name, t in state_dict.items()]


def dtype_name(dtype: torch.dtype) -> str:
    """'bfloat16' for ``torch.bfloat16``: the name both ends of a transfer agree on."""
    return str(dtype).removeprefix("torch.")


def nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return torch.Size(shape).numel() * torch.empty((), dtype=getattr(torch, dtype)).element_size()


def buckets(manifest: Manifest, bucket_bytes: int) -> list[list[int]]:
    """Indices into ``manifest`` grouped by dtype, each group at most ``bucket_bytes`` (a
    tensor larger than that is a bucket of its own), in a fixed order both sides compute."""
    groups: list[list[int]] = []
    current: dict[str, tuple[list[int], int]] = {}
    for index, (_, shape, dtype) in enumerate(manifest):
        size = nbytes(shape, dtype)
        members, used = current.get(dtype, ([], 0))
        if members and used + size > bucket_bytes:
            groups.append(members)
            members, used = [], 0
        current[dtype] = (members + [index], used + size)
    return groups + [members for members, _ in current.values() if members]


def open_group(address: str, port: int, rank: int, size: int) -> dist.ProcessGroupGloo:
    """A gloo group of ``size`` processes outside the default one; rank 0 serves the store.
    Every member must call it at once: the group forms when all have joined."""
    store = dist.TCPStore(address, port, world_size=size, is_master=rank == 0,
                          timeout=GROUP_TIMEOUT, wait_for_workers=False)
    return dist.ProcessGroupGloo(dist.PrefixStore("weights", store), rank, size, GROUP_TIMEOUT)


def broadcast(group, flat: torch.Tensor) -> None:
    """``flat`` from the group's rank 0 to every other rank (in place on the receivers)."""
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


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def checksum(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over the names and bytes of every tensor, in name order (bitwise equality)."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        digest.update(name.encode())
        digest.update(tensor_bytes(state_dict[name]))
    return digest.hexdigest()


def digests(state_dict: dict[str, torch.Tensor]) -> dict[str, str]:
    """One sha256 per tensor, over its raw bytes: what vLLM's ``compute_weight_checksums``
    reports per worker (under a ``dp0:pp0:pcp0:tp0:`` prefix) for each of its parameters."""
    return {name: hashlib.sha256(tensor_bytes(t)).hexdigest() for name, t in state_dict.items()}


@runtime_checkable
class WeightSource(Protocol):
    """A learner whose rank 0 sends its weights to the members directly."""

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole policy (CPU tensors, transformers names)."""
        ...

    async def weight_manifest(self) -> Manifest:
        """Names, shapes and dtypes of the state dict, in the order rank 0 sends it."""
        ...

    async def weight_endpoint(self) -> tuple[str, int]:
        """Rank 0's address and a free port, where a new group's rendezvous is served."""
        ...

    async def join_weight_group(self, address: str, port: int, size: int) -> None:
        """Rank 0 joins a gloo group of ``size`` (itself and the members) at the endpoint."""
        ...

    async def broadcast_weights(self, bucket_bytes: int) -> None:
        """Every rank gathers the weights; rank 0 broadcasts them, bucket by bucket."""
        ...

    async def open_transfer(self, address: str, port: int, world: int, client: Any) -> None:
        """vLLM's trainer-side transfer engine on every rank; rank 0 runs the handshake with
        the members' ``world - 1`` workers through ``client`` (vLLM's sync client protocol)."""
        ...

    async def send_transfer(self) -> None:
        """Every rank: one round of vLLM's transfer (rank 0 sends, the others gather)."""
        ...


@runtime_checkable
class BroadcastReceiver(Protocol):
    """A member that joins rank 0's gloo group and loads what it broadcasts."""

    name: str

    async def join_weight_group(self, address: str, port: int, rank: int, size: int) -> None: ...

    async def receive_weights(self, manifest: Manifest, bucket_bytes: int,
                              version: int | None = None) -> None: ...


@runtime_checkable
class TransferReceiver(Protocol):
    """A vLLM member that takes weights through vLLM's own weight transfer (NCCL)."""

    name: str

    async def transfer_workers(self) -> int:
        """Its processes that join the transfer group (tensor x pipeline parallel)."""
        ...

    def transfer_client(self) -> Any:
        """vLLM's ``VLLMWeightSyncClient`` for this member: plain synchronous calls,
        picklable, so a learner rank can drive the handshake and each round
        (``rstar2.fleet.vllm_transfer``)."""
        ...

    async def before_transfer(self) -> None:
        """A round is about to start (a server stops admitting requests until it ends)."""
        ...

    async def after_transfer(self, version: int | None) -> None:
        """A round has landed: no cached key/value of the old weights is used again (the
        prefix cache is dropped); later completions carry ``version``."""
        ...

    async def end_weight_transfer(self) -> None:
        """Leave the current transfer group (before a new one forms)."""
        ...
