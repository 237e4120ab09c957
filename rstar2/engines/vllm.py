"""VLLMEngine: in-process vLLM (``AsyncLLMEngine``, vLLM's ``AsyncLLM``) for GPU nodes.

Needs the optional extra (``pip install -e '.[gpu]'``); importing this module without vLLM
works, constructing the engine says what to install. Prompts go in as token ids
(``TokensPrompt``) and each request asks for the sampled token's log-prob; the engine is
created with ``logprobs_mode="processed_logprobs"`` so that log-probs are those of the
temperature-scaled distribution, as ``engines.base`` promises.

vLLM batches concurrent requests itself (continuous batching, prefix caching), so each
prompt is submitted as its own request. Its load for the fleet's scheduler comes from vLLM's
own Prometheus gauges, read in process (``vllm.v1.metrics.reader.get_metrics_snapshot``):
``vllm:cache_config_info``, ``vllm:kv_cache_usage_perc``, ``vllm:num_requests_running`` ...

New weights arrive one of two ways (``rstar2.cluster.weight_sync`` picks):

* vLLM's native weight transfer, where the installed vLLM has it: the engine is built with
  ``WeightTransferConfig(backend="nccl")`` and the trainer drives ``init_weight_transfer_engine``
  (once), then ``start_weight_update`` / ``update_weights`` / ``finish_weight_update`` per sync,
  while it broadcasts; the methods below pass each call on as vLLM's request objects;
* ``update_weights(state_dict)``: the tensors go to every worker through ``collective_rpc``
  (the path verl and TRL use), whose model's own ``load_weights`` maps the trainer's names
  onto vLLM's fused layers.

Either way the prefix cache is dropped after, and every completion carries the weight version
last set (``Completion.weight_version``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from rstar2.engines.base import Completion, EngineLoad, SamplingParams

TRANSFER_BACKEND = "nccl"


def import_vllm():
    try:
        import vllm
    except ImportError as exc:
        raise ImportError("vLLM engines need vLLM on the GPU nodes: pip install -e '.[gpu]' "
                          "in the rstar2 clone") from exc
    return vllm


def weight_transfer_config(vllm):
    """vLLM's ``WeightTransferConfig`` for the NCCL backend, or None where the installed vLLM
    predates native weight transfer (then weights go through ``collective_rpc``)."""
    try:
        from vllm.config import WeightTransferConfig
    except ImportError:
        return None
    return WeightTransferConfig(backend=TRANSFER_BACKEND)


class VLLMEngine:
    """In-process vLLM; ``engine_args`` go to ``vllm.AsyncEngineArgs`` (e.g.
    ``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``)."""

    def __init__(self, model: str, **engine_args):
        self.vllm = import_vllm()
        engine_args.setdefault("logprobs_mode", "processed_logprobs")
        engine_args.setdefault("enable_prefix_caching", True)
        if "weight_transfer_config" not in engine_args:
            config = weight_transfer_config(self.vllm)
            if config is not None:
                engine_args["weight_transfer_config"] = config
        self.native_transfer = engine_args.get("weight_transfer_config") is not None
        args = self.vllm.AsyncEngineArgs(model=model, **engine_args)
        self.llm = self.vllm.AsyncLLMEngine.from_engine_args(args)
        self.weight_version: int | None = None

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams
                       ) -> list[Completion]:
        sampling = self.sampling_params(params)
        return list(await asyncio.gather(*(self.one(p, sampling) for p in prompts)))

    def sampling_params(self, params: SamplingParams):
        stop_ids = params.stop_token_ids
        return self.vllm.SamplingParams(
            temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
            stop=list(params.stop) or None, stop_token_ids=list(stop_ids or []) or None,
            ignore_eos=stop_ids is not None, logprobs=0, detokenize=bool(params.stop),
            seed=params.seed)

    async def one(self, prompt: Sequence[int], sampling) -> Completion:
        from vllm.inputs import TokensPrompt

        final = None
        version = self.weight_version
        request = TokensPrompt(prompt_token_ids=list(prompt))
        async for output in self.llm.generate(request, sampling, request_id=uuid.uuid4().hex):
            final = output
        sample = final.outputs[0]
        ids = list(sample.token_ids)
        logprobs = [step[token].logprob for token, step in zip(ids, sample.logprobs)]
        reason = "length" if sample.finish_reason == "length" else "stop"
        return Completion(token_ids=ids, logprobs=logprobs, finish_reason=reason,
                          weight_version=version)

    def load(self) -> EngineLoad:
        """KV capacity and use, requests running and waiting, from vLLM's own gauges (the
        numbers ``vllm serve`` serves at ``/metrics``), read in this process."""
        from vllm.v1.metrics.reader import get_metrics_snapshot

        from rstar2.engines.fleet.members import load_from_samples

        return load_from_samples((m.name, m.labels, m.value) for m in get_metrics_snapshot()
                                 if hasattr(m, "value"))

    def samples_from(self, model: object) -> bool:
        return False  # vLLM always holds its own copy of the weights

    def reseed(self, seed: int) -> None:
        """vLLM seeds its engine once (``seed`` engine argument) and cannot restart that stream;
        reproducible sampling comes from per-request seeds (``SamplingParams.seed``), which the
        trainer gives every trajectory."""

    async def update_weights(self, state_dict: Mapping[str, Any], version: int | None = None
                             ) -> None:
        """Load the weights into every worker's model (``collective_rpc``), then drop the
        prefix cache the old weights computed; later completions carry ``version``."""
        weights = [(name, tensor.detach()) for name, tensor in state_dict.items()]
        if weights:
            await self.llm.collective_rpc(load_weights, args=(weights,))
        await self.llm.reset_prefix_cache()
        self.weight_version = version

    # ------------------------------------------------------------ vLLM's weight transfer
    def transfer_workers(self) -> int:
        """Processes of this engine that join the trainer's transfer group (TP x PP)."""
        return self.llm.vllm_config.parallel_config.world_size

    async def init_weight_transfer_engine(self, init_info: dict) -> None:
        """Join the trainer's transfer group (``init_info``: the backend's fields, e.g. NCCL's
        master address and port, this engine's rank offset and the group's size)."""
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        await self.llm.init_weight_transfer_engine(WeightTransferInitRequest(init_info=init_info))

    async def start_weight_update(self) -> None:
        """vLLM's start of one update (absent from vLLMs with the two-phase protocol)."""
        start = getattr(self.llm, "start_weight_update", None)
        if start is not None:
            await start()

    async def receive_weight_update(self, update_info: dict) -> None:
        """Receive one chunk the trainer broadcasts (names, dtypes, shapes) and load it."""
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        await self.llm.update_weights(WeightTransferUpdateRequest(update_info=update_info))

    async def finish_weight_update(self) -> None:
        """vLLM's end of one update, then drop the prefix cache the old weights computed."""
        finish = getattr(self.llm, "finish_weight_update", None)
        if finish is not None:
            await finish()
        await self.llm.reset_prefix_cache()

    def set_weight_version(self, version: int | None) -> None:
        """The version a native transfer just delivered (the trainer's protocol carries none)."""
        self.weight_version = version

    async def close(self) -> None:
        self.llm.shutdown()


def load_weights(worker, weights: list[tuple[str, Any]]) -> None:
    """Runs inside each vLLM worker: its model's own loader maps the trainer's parameter names
    (transformers layout) onto vLLM's fused layers."""
    worker.model_runner.model.load_weights(weights=weights)
