"""``vllm.distributed.weight_transfer``: the trainer side of vLLM's weight transfer.

``WeightTransferTrainerFactory.trainer_init(init_info, client, source)`` on every trainer rank;
rank 0 drives the workers' handshake through ``client`` while it opens the group, then each
``send_weights()`` runs start / update (concurrently with rank 0's broadcast) / finish. vLLM
broadcasts over NCCL (``StatelessProcessGroup`` + ``PyNcclCommunicator``); this stand-in
broadcasts the same tensors, one per parameter, over a gloo group.
"""

import threading
from dataclasses import asdict

import torch

from vllm.distributed.weight_transfer.nccl_engine import (
    FakeNCCLTrainerInitInfo,
    FakeNCCLWeightTransferInitInfo,
)


def fake_open_group(address: str, port: int, rank: int, size: int):
    """Where vLLM opens an NCCL communicator: a gloo group (rstar2's own helper)."""
    from rstar2.cluster.weight_sync import open_group

    return open_group(address, port, rank, size)


def fake_broadcast(group, tensor: torch.Tensor) -> None:
    from rstar2.cluster.weight_sync import broadcast

    broadcast(group, tensor)


class FakeModuleSource:
    """vLLM's ``ModuleSource``: a module's parameters, each gathered whole when iterated."""

    def __init__(self, module: torch.nn.Module):
        self.module = module

    def metadata(self) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
        return [(name, p.dtype, tuple(p.shape)) for name, p in self.module.named_parameters()]

    def __iter__(self):
        for name, param in self.module.named_parameters():
            full = getattr(param, "full_tensor", None)
            yield name, (full() if callable(full) else param).detach()


class FakeNCCLTrainerEngine:
    def __init__(self, info: FakeNCCLTrainerInitInfo, client, source, group):
        self.info, self.client, self.source, self.group = info, client, source, group

    @property
    def is_sender(self) -> bool:
        return self.info.rank == 0

    def send_weights(self) -> None:
        if not self.is_sender:
            for _ in self.source:  # the gathers are collectives
                pass
            return
        meta = self.source.metadata()
        update_info = {"names": [m[0] for m in meta],
                       "dtype_names": [str(m[1]).removeprefix("torch.") for m in meta],
                       "shapes": [list(m[2]) for m in meta]}
        self.client.start_weight_update()
        receiving = run_aside(self.client.update_weights, update_info)
        for (name, tensor), (declared, dtype, shape) in zip(self.source, meta):
            if name != declared or tensor.dtype != dtype or tuple(tensor.shape) != shape:
                raise ValueError(f"parameter {name} does not match the declared metadata")
            fake_broadcast(self.group, tensor.contiguous())
        receiving.join()
        self.client.finish_weight_update()


class FakeWeightTransferTrainerFactory:
    @staticmethod
    def trainer_init(init_info: FakeNCCLTrainerInitInfo, *, client, source) -> FakeNCCLTrainerEngine:
        if init_info.rank != 0:
            return FakeNCCLTrainerEngine(init_info, client, source, None)
        worker_info = FakeNCCLWeightTransferInitInfo(
            master_address=init_info.master_address, master_port=init_info.master_port,
            rank_offset=1, world_size=init_info.world_size, packed=init_info.packed)
        joining = run_aside(client.init_weight_transfer_engine, asdict(worker_info))
        group = fake_open_group(init_info.master_address, init_info.master_port, 0,
                                init_info.world_size)
        joining.join()
        return FakeNCCLTrainerEngine(init_info, client, source, group)


class Aside(threading.Thread):
    """A call on a side thread whose exception is raised again on ``join``."""

    def __init__(self, call, *args):
        super().__init__(daemon=True)
        self.call, self.args, self.error = call, args, None

    def run(self):
        try:
            self.call(*self.args)
        except BaseException as exc:  # noqa: BLE001 - raised again in join
            self.error = exc

    def join(self, timeout=None):
        super().join(timeout)
        if self.error is not None:
            raise self.error


def run_aside(call, *args) -> Aside:
    thread = Aside(call, *args)
    thread.start()
    return thread


ModuleSource = FakeModuleSource
WeightTransferTrainerFactory = FakeWeightTransferTrainerFactory
