"""The trainer side of vLLM's weight transfer (NCCL), for learners and for single members.

    client = FanOutClient([member.transfer_client() for member in members], workers)
    transfer = open_trainer_transfer(model, address=..., port=..., world=1 + sum(workers),
                                     rank=rank, client=client)      # on every learner rank
    transfer.send_weights()                                           # every rank, every round

vLLM splits a sync between a trainer-side engine and the inference workers:
``WeightTransferTrainerFactory.trainer_init(NCCLTrainerInitInfo(...), client, source)`` runs on
every trainer rank (rank 0 is the sender; the others only join the collectives that gather each
FSDP2 shard with ``full_tensor()``), and ``send_weights()`` drives the inference side through
``client`` -- ``init_weight_transfer_engine`` once, then per round ``start_weight_update``,
``update_weights`` (concurrently with rank 0's broadcast) and ``finish_weight_update`` -- so
the weights go from the learner's GPUs to every member's workers without passing through any
other process or the CPU.

``FanOutClient`` is that client (vLLM's ``VLLMWeightSyncClient`` protocol) over several
members, each reached through its own client (a Ray actor's, or vLLM's own HTTP client for a
``vllm serve`` member): every call goes to all members at once, and at the handshake each
member's workers get their own ranks in the one group (``rank_offset``: 1 for the first
member, after the previous members' workers for the next; vLLM adds each worker's own rank
within its member).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from rstar2.engines.vllm import require


class FanOutClient:
    """vLLM's ``VLLMWeightSyncClient`` over several members; see the module docstring.
    ``workers[i]``: the processes of member ``i`` that join the group."""

    def __init__(self, clients: Sequence[Any], workers: Sequence[int]):
        if len(clients) != len(workers):
            raise ValueError("one worker count per member client")
        self.clients, self.workers = list(clients), list(workers)

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        before = [sum(self.workers[:i]) for i in range(len(self.clients))]
        self.each(lambda client, i: client.init_weight_transfer_engine(
            {**init_info, "rank_offset": init_info["rank_offset"] + before[i]}))

    def start_weight_update(self) -> None:
        self.each(lambda client, _: client.start_weight_update())

    def update_weights(self, update_info: dict[str, Any] | list[dict[str, Any]]) -> None:
        self.each(lambda client, _: client.update_weights(update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.each(lambda client, _: client.finish_weight_update(weight_version))

    def each(self, call: Callable[[Any, int], None]) -> None:
        """``call`` on every member at once (a member's workers block inside the collective
        until every member has joined it), raising the first failure."""
        with ThreadPoolExecutor(max_workers=len(self.clients)) as pool:
            for future in [pool.submit(call, client, i) for i, client in enumerate(self.clients)]:
                future.result()


def open_trainer_transfer(source: torch.nn.Module | Mapping[str, torch.Tensor], *,
                          address: str, port: int, world: int, rank: int, client: Any):
    """vLLM's trainer-side NCCL engine over ``source`` (a module, FSDP2-sharded or not, or a
    state dict whose tensors are replaced in place between rounds), as trainer ``rank`` of a
    group of ``world`` processes (the trainer's sender and every member worker). Rank 0 runs
    the handshake through ``client`` before it returns."""
    init_info_class = require("vllm.distributed.weight_transfer.nccl_engine", "NCCLTrainerInitInfo")
    factory = require("vllm.distributed.weight_transfer", "WeightTransferTrainerFactory")
    if isinstance(source, torch.nn.Module):
        weights = require("vllm.distributed.weight_transfer", "ModuleSource")(source)
    else:
        weights = state_dict_source(source)
    info = init_info_class(master_address=address, master_port=port, world_size=world, rank=rank)
    return factory.trainer_init(info, client=client, source=weights)


def state_dict_source(state_dict: Mapping[str, torch.Tensor]):
    """vLLM's ``WeightSource`` over a state dict held by this one process: every tensor is
    owned here and sent whole, in the dict's order. Set ``tensors`` to the next round's dict
    (the same names, shapes and dtypes) before sending it."""
    from functools import cached_property

    base = require("vllm.distributed.weight_transfer.base", "WeightSource")
    param_meta = require("vllm.distributed.weight_transfer.base", "ParamMeta")

    class StateDictSource(base):
        tensors = state_dict

        @cached_property
        def metadata(self):
            return [param_meta(name, t.dtype, tuple(t.shape)) for name, t in self.tensors.items()]

        def iter_full(self):
            yield from ((name, t.detach()) for name, t in self.tensors.items())

    return StateDictSource()
