"""``vllm.distributed.weight_transfer.nccl_engine``: the trainer's and the workers' init info."""

from dataclasses import dataclass, field


@dataclass
class FakeNCCLTrainerInitInfo:
    master_address: str
    master_port: int
    world_size: int
    rank: int = field(kw_only=True)
    packed: bool = True


@dataclass
class FakeNCCLWeightTransferInitInfo:
    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    packed: bool = False


@dataclass
class FakeNCCLWeightTransferUpdateInfo:
    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]


NCCLTrainerInitInfo = FakeNCCLTrainerInitInfo
NCCLWeightTransferInitInfo = FakeNCCLWeightTransferInitInfo
NCCLWeightTransferUpdateInfo = FakeNCCLWeightTransferUpdateInfo
