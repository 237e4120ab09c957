"""vLLM on the CPU, for tests: the installed vLLM package with only its GPU-bound parts swapped.

    from tests.fakes.vllm_cpu import install
    install()        # in this process; Ray workers: runtime_env worker_process_setup_hook

What is swapped (see ../README.md): the engine behind ``vllm.AsyncLLMEngine`` (``FakeAsyncLLM``,
a subclass of vLLM's own ``AsyncLLM`` whose engine core is an ``HFEngine`` on the embedded
model, reached through vLLM's real msgpack wire format), the NCCL communicator and CUDA-stream
packing of the NCCL weight transfer (gloo, ``transport``), and the two GPU steps of the worker's
NCCL engine (``worker.CPUNCCLWeightTransferEngine``). Everything else rstar2 touches -- engine
arguments, sampling parameters, prompts, outputs, log-prob records, weight-transfer configs,
init and update records, the trainer factory and its handshake, the HTTP routes and their
request models, the metrics reader -- is the installed vLLM's own.
"""

from __future__ import annotations

INSTALLED = False


def swaps() -> list[tuple[object, str, object, object]]:
    """(module, attribute, stand-in, vLLM's own) for every part swapped."""
    import vllm.engine.async_llm_engine as async_llm_engine
    from vllm.distributed.weight_transfer import nccl_common, nccl_engine, packed_tensor
    from vllm.v1.engine.async_llm import AsyncLLM

    from tests.fakes.vllm_cpu import transport
    from tests.fakes.vllm_cpu.engine import FakeAsyncLLM

    return [
        (async_llm_engine, "AsyncLLMEngine", FakeAsyncLLM, AsyncLLM),
        (nccl_engine, "worker_init_process_group", transport.worker_init_process_group,
         nccl_common.worker_init_process_group),
        (nccl_engine, "open_trainer_endpoint", transport.open_trainer_endpoint,
         nccl_common.trainer_init),
        (nccl_engine, "packed_nccl_broadcast_producer", transport.packed_producer,
         packed_tensor.packed_nccl_broadcast_producer),
        (nccl_engine, "packed_nccl_broadcast_consumer", transport.packed_consumer,
         packed_tensor.packed_nccl_broadcast_consumer),
    ]


def install() -> None:
    """Swap the GPU-bound parts (idempotent)."""
    global INSTALLED
    if INSTALLED:
        return
    from vllm.distributed.weight_transfer import WeightTransferEngineFactory

    from tests.fakes.vllm_cpu.worker import CPUNCCLWeightTransferEngine

    for module, name, stand_in, _ in swaps():
        setattr(module, name, stand_in)
    WeightTransferEngineFactory._registry["nccl"] = lambda: CPUNCCLWeightTransferEngine
    INSTALLED = True


def uninstall() -> None:
    """Put vLLM's own parts back (the contract tests check the unswapped package)."""
    global INSTALLED
    if not INSTALLED:
        return
    from vllm.distributed.weight_transfer import WeightTransferEngineFactory, nccl_engine

    for module, name, _, real in swaps():
        setattr(module, name, real)
    WeightTransferEngineFactory._registry["nccl"] = lambda: nccl_engine.NCCLWeightTransferEngine
    INSTALLED = False
