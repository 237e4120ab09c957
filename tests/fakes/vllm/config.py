"""``vllm.config.WeightTransferConfig``: which backend moves trainer weights into the engine."""

from dataclasses import dataclass


@dataclass
class FakeWeightTransferConfig:
    backend: str = "nccl"

    def __post_init__(self):
        if self.backend not in ("nccl", "ipc"):
            raise ValueError(f"unknown weight transfer backend {self.backend!r}")


WeightTransferConfig = FakeWeightTransferConfig
