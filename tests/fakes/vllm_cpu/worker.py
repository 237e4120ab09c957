"""A vLLM worker on the CPU: one per tensor-parallel rank of a ``FakeAsyncLLM``.

It keeps the real worker's weight-transfer lifecycle (``vllm/v1/worker/gpu_worker.py``: start
before update, update only inside a round, finish after, the same errors) over vLLM's own
``WeightTransferEngineFactory`` and NCCL engine, with the GPU-only steps taken out
(``CPUNCCLWeightTransferEngine``). Its model is a transformers model given vLLM's
``load_weights((name, tensor), ...)`` by name; rank 0's is the one the stand-in samples from, the
others hold a copy (a tensor-parallel shard would hold a slice), so every rank's transfer and
checksum is real. ``worker_extension_cls`` is mixed in as vLLM does it: resolved by qualified
name, refused when an attribute clashes with the worker's, added as a base class.
"""

from __future__ import annotations

import copy
import types

import torch

from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine


class CPUNCCLWeightTransferEngine(NCCLWeightTransferEngine):
    """vLLM's NCCL worker engine without its GPU steps: layerwise reload (vLLM's own model
    layers; the stand-in's transformers model loads by name) and the device sync."""

    def start_weight_update(self) -> None:
        """(vLLM: ``initialize_layerwise_reload`` of its model layers.)"""

    def finish_weight_update(self) -> None:
        """(vLLM: ``finalize_layerwise_reload``.)"""

    def update_weights(self, update_info: dict) -> None:
        self.receive_weights(self.parse_update_info(update_info))


def load_weights(model: torch.nn.Module, weights) -> set[str]:
    """vLLM's ``model.load_weights``: (name, tensor) pairs by the trainer's names."""
    params = model.state_dict()
    loaded = set()
    with torch.no_grad():
        for name, tensor in weights:
            if name not in params:
                raise KeyError(f"no parameter {name}")
            params[name].copy_(tensor)
            loaded.add(name)
    return loaded


def with_load_weights(model: torch.nn.Module) -> torch.nn.Module:
    model.load_weights = types.MethodType(lambda self, weights: load_weights(self, weights), model)
    return model


class FakeWorker:
    """See the module docstring."""

    def __init__(self, model: torch.nn.Module, vllm_config, transfer_config, rank: int):
        from vllm.distributed.weight_transfer import WeightTransferEngineFactory

        self.model = with_load_weights(model if rank == 0 else copy.deepcopy(model))
        self.vllm_config, self.rank = vllm_config, rank
        self.weight_transfer_engine = None
        if transfer_config is not None:
            self.weight_transfer_engine = WeightTransferEngineFactory.create_engine(
                transfer_config, vllm_config, torch.device("cpu"), self.model)
        self._weight_update_active = False

    def get_model(self) -> torch.nn.Module:
        return self.model

    def _check_weight_transfer_engine(self) -> None:
        if self.weight_transfer_engine is None:
            raise RuntimeError("Weight transfer not configured. "
                               "Please set weight_transfer_config to enable weight transfer.")

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self._check_weight_transfer_engine()
        engine = self.weight_transfer_engine
        engine.init_transfer_engine(engine.parse_init_info(init_info))

    def shutdown_weight_transfer_engine(self) -> None:
        if self._weight_update_active:
            raise RuntimeError("Cannot release a trainer connection during a weight update")
        if self.weight_transfer_engine is not None:
            self.weight_transfer_engine.shutdown()

    def start_weight_update(self) -> None:
        self._check_weight_transfer_engine()
        if self._weight_update_active:
            raise RuntimeError("start_weight_update called while a weight update is already "
                               "active. Call finish_weight_update first.")
        self.weight_transfer_engine.start_weight_update()
        self._weight_update_active = True

    def update_weights(self, update_info: dict | list[dict]) -> None:
        self._check_weight_transfer_engine()
        if not self._weight_update_active:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        if isinstance(update_info, list):
            parallel = self.vllm_config.parallel_config
            update_info = update_info[parallel.data_parallel_index * parallel.world_size + self.rank]
        try:
            self.weight_transfer_engine.update_weights(update_info)
        except BaseException:
            self._weight_update_active = False
            raise

    def finish_weight_update(self) -> None:
        self._check_weight_transfer_engine()
        if not self._weight_update_active:
            raise RuntimeError("finish_weight_update called without a matching "
                               "start_weight_update.")
        self.weight_transfer_engine.finish_weight_update()
        self._weight_update_active = False

    def compute_weight_checksums(self) -> dict[str, str]:
        """vLLM's digests of every parameter, under the worker's parallel-rank prefix."""
        from vllm.model_executor.model_loader.weight_checksum import compute_tensor_digests

        prefix = f"dp0:pp0:pcp0:tp{self.rank}:"
        return {prefix + name: digest for name, digest in compute_tensor_digests(self.model).items()}


def worker_class(extension: str | None) -> type:
    """``FakeWorker``, with ``extension`` (a qualified name) mixed in the way vLLM does it."""
    if not extension:
        return FakeWorker
    from vllm.utils.import_utils import resolve_obj_by_qualname

    mixin = resolve_obj_by_qualname(extension)
    for attr in dir(mixin):
        if not attr.startswith("__") and hasattr(FakeWorker, attr):
            raise AssertionError(f"Worker class {FakeWorker} already has an attribute {attr}, "
                                 f"which conflicts with the worker extension class {mixin}.")
    return type("FakeWorkerWithExtension", (FakeWorker, mixin), {})
