"""VLLMEngine: in-process vLLM (``AsyncLLM``, exported as ``vllm.AsyncLLMEngine``) for GPU nodes.

Needs the optional extra (``pip install -e '.[gpu]'``, ``vllm>=0.33``); importing this module
without vLLM works, constructing the engine says what to install, and a vLLM that lacks a
symbol rstar2 calls is refused by name (``require``). Prompts go in as token ids
(``TokensPrompt``) and each request asks for the sampled token's log-prob; the engine is
created with ``logprobs_mode="processed_logprobs"`` so that log-probs are those of the
temperature-scaled distribution, as ``engines.base`` promises. Every completion carries
vLLM's own finish reason ('stop', 'length', 'abort', 'error', 'repetition').

vLLM batches concurrent requests itself (continuous batching, prefix caching), so each
prompt is submitted as its own request. Its load for the fleet's scheduler comes from vLLM's
own Prometheus gauges, read in process (``vllm.v1.metrics.reader.get_metrics_snapshot``). That
registry is the process's: a second vLLM engine would take it over (vLLM unregisters the
first one's metrics), so one process holds one ``VLLMEngine`` at a time; more members run in
Ray actors.

New weights arrive one of two ways, neither of which sends a function or a tensor through
vLLM's msgpack RPC (which refuses both):

* ``update_weights(state_dict)``: the tensors go through a shared-memory file, bucket by
  bucket, to ``rstar2.engines.vllm_worker.WeightLoader``, the worker extension this engine
  registers (``worker_extension_cls``); each worker's model loads them by name;
* vLLM's native weight transfer (``WeightTransferConfig(backend="nccl")``): the learner drives
  ``init_weight_transfer_engine`` (once), then ``start_weight_update`` / ``update_weights`` /
  ``finish_weight_update`` per round while it broadcasts (``rstar2.fleet.vllm_transfer``);
  the methods below pass each call on as vLLM's request objects.

Either way the prefix cache is dropped after: ``reset_prefix_cache()`` answers False while
requests are running (it keeps the blocks they use), and then the running requests are
preempted and recomputed under the new weights (``reset_running_requests=True``), so nothing
is sampled from keys and values the old weights computed. Every completion carries the weight
version last set (``Completion.weight_version``); weight checksums are vLLM's own
(``compute_weight_checksums``: one sha256 per parameter and worker).
"""

from __future__ import annotations

import asyncio
import importlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from rstar2.engines.base import Completion, EngineError, EngineLoad, SamplingParams

VLLM_REQUIREMENT = "vllm>=0.33"
TRANSFER_BACKEND = "nccl"
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
LIVE: list[VLLMEngine] = []  # the engine whose metrics this process's registry holds


def import_vllm():
    try:
        import vllm
    except ImportError as exc:
        raise ImportError("vLLM engines need vLLM on the GPU nodes: pip install -e '.[gpu]' "
                          "in the rstar2 clone") from exc
    return vllm


def require(module: str, name: str):
    """``module.name`` from the installed vLLM; an ``ImportError`` naming what rstar2 needs
    when that vLLM does not have it (the feature test on the symbol actually used)."""
    vllm = import_vllm()
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"rstar2 needs {VLLM_REQUIREMENT}: vLLM {vllm.__version__} has no "
                          f"{module}.{name} (pip install -e '.[gpu]')") from exc
    return found


ASYNC_LLM_CALLS = ("generate", "collective_rpc", "reset_prefix_cache", "compute_weight_checksums",
                   "init_weight_transfer_engine", "start_weight_update", "update_weights",
                   "finish_weight_update", "shutdown_weight_transfer_engine", "shutdown")
"""Every method of vLLM's ``AsyncLLM`` this module calls (``tests/engines/test_vllm_contract.py``
checks each call against the real signature)."""


class VLLMEngine:
    """In-process vLLM; ``engine_args`` go to ``vllm.AsyncEngineArgs`` (e.g.
    ``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``)."""

    def __init__(self, model: str, **engine_args):
        from rstar2.engines.vllm_worker import EXTENSION

        vllm = import_vllm()
        llm_class = vllm.AsyncLLMEngine
        missing = [name for name in ASYNC_LLM_CALLS if not hasattr(llm_class, name)]
        if missing:
            raise ImportError(f"rstar2 needs {VLLM_REQUIREMENT}: vLLM {vllm.__version__}'s "
                              f"AsyncLLM has no {', '.join(missing)}")
        if LIVE:
            raise RuntimeError("one vLLM engine per process: vLLM's metrics registry holds one "
                               "engine's load; run more vLLM members in Ray actors (ray: true)")
        engine_args.setdefault("logprobs_mode", "processed_logprobs")
        engine_args.setdefault("enable_prefix_caching", True)
        engine_args.setdefault("worker_extension_cls", EXTENSION)
        if "weight_transfer_config" not in engine_args:
            config = require("vllm.config", "WeightTransferConfig")
            engine_args["weight_transfer_config"] = config(backend=TRANSFER_BACKEND)
        self.llm = llm_class.from_engine_args(vllm.AsyncEngineArgs(model=model, **engine_args))
        self.weight_version: int | None = None
        LIVE.append(self)

    # ------------------------------------------------------------------ generation
    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams
                       ) -> list[Completion]:
        sampling = self.sampling_params(params)
        return list(await asyncio.gather(*(self.one(p, sampling) for p in prompts)))

    def sampling_params(self, params: SamplingParams):
        stop_ids = params.stop_token_ids
        return require("vllm", "SamplingParams")(
            temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
            stop=list(params.stop) or None, stop_token_ids=list(stop_ids or []) or None,
            ignore_eos=stop_ids is not None, logprobs=0, detokenize=bool(params.stop),
            seed=params.seed)

    async def one(self, prompt: Sequence[int], sampling) -> Completion:
        final = None
        version = self.weight_version
        request = require("vllm.inputs", "TokensPrompt")(prompt_token_ids=list(prompt))
        async for output in self.llm.generate(request, sampling, request_id=uuid.uuid4().hex):
            final = output
        sample = final.outputs[0]
        if sample.finish_reason not in FINISH_REASONS:
            raise EngineError(f"vLLM finished a request with {sample.finish_reason!r}")
        ids = list(sample.token_ids)
        logprobs = [step[token].logprob for token, step in zip(ids, sample.logprobs)]
        return Completion(token_ids=ids, logprobs=logprobs, finish_reason=sample.finish_reason,
                          weight_version=version)

    def load(self) -> EngineLoad:
        """KV capacity and use, requests running and waiting, preemptions and decode
        counters, from vLLM's own metrics (the numbers ``vllm serve`` serves at
        ``/metrics``), read in this process."""
        from rstar2.engines.vllm_metrics import load_from_samples

        snapshot = require("vllm.v1.metrics.reader", "get_metrics_snapshot")()
        return load_from_samples(metric_samples(snapshot))

    def samples_from(self, model: object) -> bool:
        return False  # vLLM always holds its own copy of the weights

    def reseed(self, seed: int) -> None:
        """vLLM seeds its engine once (``seed`` engine argument) and cannot restart that stream;
        reproducible sampling comes from per-request seeds (``SamplingParams.seed``), which the
        trainer gives every trajectory."""

    # ------------------------------------------------------------------ weights
    async def update_weights(self, state_dict: Mapping[str, Any], version: int | None = None
                             ) -> None:
        """Load ``state_dict`` into every worker through shared memory (see the module
        docstring), then drop the prefix cache the old weights computed; later completions
        carry ``version``."""
        from rstar2.engines.vllm_worker import SharedWeights
        from rstar2.weights.wire import BUCKET_BYTES, buckets, manifest_of

        if state_dict:
            manifest = manifest_of(dict(state_dict))
            groups = buckets(manifest, BUCKET_BYTES)
            shared = SharedWeights(manifest, groups)
            try:
                for bucket in groups:
                    rows = shared.write(state_dict, manifest, bucket)
                    await self.llm.collective_rpc("rstar2_load_shared",
                                                  args=(shared.path, shared.size, rows))
            finally:
                shared.close()
        await self.weights_loaded(version)

    async def weights_loaded(self, version: int | None) -> None:
        """Drop every cached key/value of the old weights (preempting requests that hold
        some: they are recomputed under the new ones); later completions carry ``version``."""
        if not await self.llm.reset_prefix_cache():
            await self.llm.reset_prefix_cache(reset_running_requests=True)
        self.weight_version = version

    async def release_cache(self) -> None:
        """Empty vLLM's prefix cache; its KV pool stays allocated on the GPU, where the update
        does not share it (``TrainableEngine.release_cache``)."""
        await self.llm.reset_prefix_cache()

    async def weight_digests(self) -> list[dict[str, str]]:
        """vLLM's sha256 of every parameter, one dict per worker (keys prefixed with the
        worker's parallel ranks, in vLLM's own layout: fused projections, shards)."""
        return await self.llm.compute_weight_checksums()

    def transfer_workers(self) -> int:
        """Processes of this engine that join the trainer's transfer group (TP x PP)."""
        return self.llm.vllm_config.parallel_config.world_size

    async def init_weight_transfer_engine(self, init_info: dict) -> None:
        """Join the trainer's transfer group (``init_info``: the backend's fields, e.g. NCCL's
        master address and port, this engine's rank offset and the group's size)."""
        request = require("vllm.distributed.weight_transfer.base", "WeightTransferInitRequest")
        await self.llm.init_weight_transfer_engine(request(init_info=init_info))

    async def start_weight_update(self) -> None:
        await self.llm.start_weight_update()

    async def receive_weight_update(self, update_info: dict | list[dict]) -> None:
        """Receive one round the trainer broadcasts (names, dtypes, shapes) and load it."""
        request = require("vllm.distributed.weight_transfer.base", "WeightTransferUpdateRequest")
        await self.llm.update_weights(request(update_info=update_info))

    async def finish_weight_update(self) -> None:
        await self.llm.finish_weight_update()

    async def end_weight_transfer(self) -> None:
        """Leave the trainer's transfer group (a new one is about to form)."""
        await self.llm.shutdown_weight_transfer_engine()

    async def close(self) -> None:
        self.llm.shutdown()
        if self in LIVE:
            LIVE.remove(self)


def metric_samples(metrics) -> list[tuple[str, dict, float]]:
    """(name, labels, value) of vLLM's in-process metrics: a gauge's or counter's value, a
    histogram's ``_sum`` and ``_count`` (as ``/metrics`` names them)."""
    samples = []
    for m in metrics:
        if hasattr(m, "value"):
            samples.append((m.name, m.labels, m.value))
        elif hasattr(m, "sum") and hasattr(m, "count"):
            samples += [(m.name + "_sum", m.labels, m.sum), (m.name + "_count", m.labels, m.count)]
    return samples
