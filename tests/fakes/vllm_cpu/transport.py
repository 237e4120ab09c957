"""The one piece of vLLM's weight transfer a CPU cannot run, swapped for gloo: the NCCL
communicator (``PyNcclCommunicator``) and the CUDA-stream packing around it.

Everything else is vLLM's own: the rendezvous (``StatelessProcessGroup`` over a TCPStore),
each worker's rank in the group (``nccl_common._worker_group_rank``: rank offset, data-parallel
index, rank within the engine), the init and update records and their validation, the
trainer's metadata checks and the order of the handshake. ``install`` puts these functions
where ``nccl_engine`` looks them up.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(minutes=5)


class GlooCommunicator:
    """Where vLLM opens a ``PyNcclCommunicator``: a gloo group over the same rendezvous."""

    def __init__(self, address: str, port: int, rank: int, world_size: int):
        from vllm.distributed.utils import StatelessProcessGroup

        group = StatelessProcessGroup.create(host=address, port=port, rank=rank,
                                             world_size=world_size)
        self.rank, self.world_size = rank, world_size
        self.gloo = dist.ProcessGroupGloo(dist.PrefixStore("fake-nccl", group.store), rank,
                                          world_size, TIMEOUT)

    def broadcast(self, tensor: torch.Tensor, src: int = 0, stream=None) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = src
        self.gloo.broadcast([tensor], options).wait()

    def destroy(self) -> None:
        self.gloo = None


def worker_init_process_group(init_info, parallel_config) -> GlooCommunicator:
    """vLLM's worker side: its rank as vLLM computes it, the group over gloo."""
    from vllm.distributed.weight_transfer.nccl_common import _worker_group_rank

    rank = _worker_group_rank(init_info.rank_offset, parallel_config)
    return GlooCommunicator(init_info.master_address, init_info.master_port, rank,
                            init_info.world_size)


def open_trainer_endpoint(init_info, rank: int = 0) -> GlooCommunicator:
    """vLLM's trainer side (``nccl_common.trainer_init``): rank 0 of the group."""
    return GlooCommunicator(init_info.master_address, init_info.master_port, rank,
                            init_info.world_size)


def packed_producer(iterator, group, src, post_iter_func, buffer_size_bytes=0, num_buffers=0):
    """``packed_nccl_broadcast_producer`` without CUDA streams: one broadcast per tensor."""
    for item in iterator:
        group.broadcast(post_iter_func(item).contiguous(), src=src)


def packed_consumer(iterator, group, src, post_unpack_func, buffer_size_bytes=0, num_buffers=0,
                    device="cpu"):
    """``packed_nccl_broadcast_consumer`` without CUDA streams: one broadcast per tensor,
    loaded as it arrives."""
    for name, (shape, dtype) in iterator:
        tensor = torch.empty(shape, dtype=dtype, device=device)
        group.broadcast(tensor, src=src)
        post_unpack_func([(name, tensor)])
