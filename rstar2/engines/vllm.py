"""VLLMEngine: in-process vLLM (``AsyncLLMEngine``) for GPU nodes.

Needs the optional extra (``pip install 'rstar2[gpu]'``); importing this module without vLLM
works, constructing the engine says what to install. Prompts go in as token ids
(``TokensPrompt``) and each request asks for the sampled token's log-prob; the engine is
created with ``logprobs_mode="processed_logprobs"`` so that log-probs are those of the
temperature-scaled distribution, as ``engines.base`` promises.

vLLM batches concurrent requests itself (continuous batching, prefix caching), so each
prompt is submitted as its own request. As a ``TrainableEngine`` it receives new weights
through vLLM's ``collective_rpc`` and resets its prefix cache after.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from rstar2.engines.base import Completion, SamplingParams


def import_vllm():
    try:
        import vllm
    except ImportError as exc:
        raise ImportError("VLLMEngine needs vLLM on a GPU machine: pip install 'rstar2[gpu]'"
                          ) from exc
    return vllm


class VLLMEngine:
    """In-process vLLM; ``engine_args`` go to ``vllm.AsyncEngineArgs`` (e.g.
    ``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``)."""

    def __init__(self, model: str, **engine_args):
        self.vllm = import_vllm()
        engine_args.setdefault("logprobs_mode", "processed_logprobs")
        engine_args.setdefault("enable_prefix_caching", True)
        args = self.vllm.AsyncEngineArgs(model=model, **engine_args)
        self.llm = self.vllm.AsyncLLMEngine.from_engine_args(args)

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams
                       ) -> list[Completion]:
        sampling = self.sampling_params(params)
        return list(await asyncio.gather(*(self.one(p, sampling) for p in prompts)))

    def sampling_params(self, params: SamplingParams):
        stop_ids = params.stop_token_ids
        return self.vllm.SamplingParams(
            temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
            stop=list(params.stop) or None, stop_token_ids=list(stop_ids or []) or None,
            ignore_eos=stop_ids is not None, logprobs=0, detokenize=bool(params.stop))

    async def one(self, prompt: Sequence[int], sampling) -> Completion:
        from vllm.inputs import TokensPrompt

        final = None
        request = TokensPrompt(prompt_token_ids=list(prompt))
        async for output in self.llm.generate(request, sampling, request_id=uuid.uuid4().hex):
            final = output
        sample = final.outputs[0]
        ids = list(sample.token_ids)
        logprobs = [step[token].logprob for token, step in zip(ids, sample.logprobs)]
        reason = "length" if sample.finish_reason == "length" else "stop"
        return Completion(token_ids=ids, logprobs=logprobs, finish_reason=reason)

    def samples_from(self, model: object) -> bool:
        return False  # vLLM always holds its own copy of the weights

    def reseed(self, seed: int) -> None:
        """vLLM seeds its engine once (``seed`` engine argument); per-step reseeding would need
        a seed per request, which makes identical prompts sample identically, so it keeps its
        own stream."""

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Load the weights into every worker's model (``collective_rpc``), then drop the
        prefix cache the old weights computed."""
        weights = [(name, tensor.detach()) for name, tensor in state_dict.items()]
        if weights:
            await self.llm.collective_rpc(load_weights, args=(weights,))
        await self.llm.reset_prefix_cache()

    async def close(self) -> None:
        self.llm.shutdown()


def load_weights(worker, weights: list[tuple[str, Any]]) -> None:
    """Runs inside each vLLM worker: its model's own loader maps the trainer's parameter names
    (transformers layout) onto vLLM's fused layers."""
    worker.model_runner.model.load_weights(weights=weights)
