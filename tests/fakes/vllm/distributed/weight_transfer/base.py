"""``vllm.distributed.weight_transfer.base``: the API-level request objects."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeWeightTransferInitRequest:
    init_info: dict[str, Any] = field(default_factory=dict)


@dataclass
class FakeWeightTransferUpdateRequest:
    update_info: dict[str, Any] = field(default_factory=dict)


WeightTransferInitRequest = FakeWeightTransferInitRequest
WeightTransferUpdateRequest = FakeWeightTransferUpdateRequest
