"""``rstar2 serve-model``: an engine behind an OpenAI-compatible completions API.

The subset of the API that token-in/token-out rollouts use, with vLLM's extensions, so that
``OpenAIEngine`` talks to this server, vLLM and SGLang the same way:

* ``GET /v1/models`` (with the model's card under ``rstar2``, when it has one), ``GET /health``;
* ``GET /metrics``: the engine's KV capacity and use and its queue under vLLM's metric names
  (``vllm:cache_config_info`` with ``kv_cache_size_tokens``, ``vllm:kv_cache_usage_perc``,
  ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:num_preemptions_total``, ``vllm:generation_tokens_total``, and the sum and count of
  ``vllm:inter_token_latency_seconds``), so a fleet reads this server and vLLM alike;
* ``POST /update_weights_from_disk`` with ``{"model_path": dir}`` (SGLang's route): load the
  ``*.safetensors`` weights in ``dir`` (a trainer's push between RL steps); off unless the
  operator allows a directory and sets a token, and refused unless every tensor is one of
  the model's parameters (``weights.disk``);
* ``POST /v1/completions`` with ``prompt`` as text, token ids, or a list of either; ``n``,
  ``max_tokens``, ``temperature``, ``top_p``, ``stop``; vLLM's ``stop_token_ids``,
  ``ignore_eos``, ``return_token_ids`` (adds ``token_ids``/``prompt_token_ids`` to each
  choice) and ``return_tokens_as_token_ids`` (``logprobs.tokens`` as ``"token_id:N"``).
  ``logprobs`` (any value >= 0) returns the sampled tokens' log-probs; alternatives
  (``top_logprobs``) are not computed. No streaming.

Log-probs follow ``engines.base`` (temperature-scaled distribution).

Hardened as ``rstar2.service`` describes (one error shape, a body limit, work cancelled when
its client leaves, a bounded drain at shutdown), with the request limits of
``serve.admission`` (400/429 before any work) and its fair sharing of the engine (a request's
sequences enter the engine in turns, so no request takes every decode row; those waiting their
turn count as waiting at ``/metrics``). Text prompts are tokenised in a thread, so a long one
never stalls ``/health`` or ``/metrics``.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from fastapi import FastAPI, Header
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from pydantic import BaseModel, ConfigDict, Field

from rstar2.engines.base import Completion, SamplerFloat, SamplingParams
from rstar2.engines.hf import HFEngine
from rstar2.serve.admission import Admission, FairShare, Limits, ServeLimits
from rstar2.service import READ_TIMEOUT_S, ServiceError, guard
from rstar2.weights.disk import WeightUpdates, check_matches, read_weights

MIB = 1 << 20


class CompletionRequest(BaseModel):
    """The accepted fields of ``POST /v1/completions`` (others are ignored, as by OpenAI)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | list[str] | list[int] | list[list[int]] = Field(
        description="Text, token ids, or a batch of either.")
    max_tokens: int = Field(16, ge=1)
    temperature: SamplerFloat = Field(1.0, ge=0.0, allow_inf_nan=False)
    top_p: SamplerFloat = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    n: int = Field(1, ge=1)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    seed: int | None = Field(None, ge=0)
    logprobs: int | None = Field(None, ge=0)
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    stream: bool = False


class WeightsRequest(BaseModel):
    """``POST /update_weights_from_disk`` (SGLang's route and field name)."""

    model_path: str = Field(description="Directory holding the new weights as *.safetensors.")


class LoadCollector:
    """The engine's ``load()`` as vLLM's Prometheus metrics, read at every scrape; the
    sequences ``share`` holds back for their turn count as waiting, as they would in vLLM's
    queue."""

    def __init__(self, engine: HFEngine, model_name: str, share: FairShare):
        self.engine, self.model_name, self.share = engine, model_name, share

    def collect(self):
        load = self.engine.load()
        labels = {"model_name": self.model_name, "engine": "0"}

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=list(labels))
            family.add_metric(list(labels.values()), value)
            return family

        usage = load.kv_used_tokens / load.kv_capacity_tokens if load.kv_capacity_tokens else 0.0
        yield gauge("vllm:num_requests_running", "Requests in the decode batch.", load.running)
        yield gauge("vllm:num_requests_waiting", "Requests waiting to be admitted.",
                    load.waiting + self.share.held)
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
        preemptions = CounterMetricFamily("vllm:num_preemptions", "Cumulative preemptions.",
                                          labels=list(labels))
        preemptions.add_metric(list(labels.values()), load.preemptions)
        yield preemptions
        generated = CounterMetricFamily("vllm:generation_tokens", "Generated tokens.",
                                        labels=list(labels))
        generated.add_metric(list(labels.values()), load.generation_tokens)
        yield generated
        latency = HistogramMetricFamily("vllm:inter_token_latency_seconds",
                                        "Time between a sequence's consecutive tokens.",
                                        labels=list(labels))
        latency.add_metric(list(labels.values()), [("+Inf", load.inter_tokens)],
                           load.inter_token_seconds)
        yield latency
        info = {"block_size": "1", "num_gpu_blocks": str(load.kv_capacity_tokens),
                "kv_cache_size_tokens": str(load.kv_capacity_tokens), "engine": "0"}
        cache = GaugeMetricFamily("vllm:cache_config_info", "Information of the KV cache.",
                                  labels=list(info))
        cache.add_metric(list(info.values()), 1.0)
        yield cache


def create_app(engine: HFEngine, model_name: str, card: dict | None = None,
               limits: ServeLimits | None = None, weights: WeightUpdates | None = None,
               read_timeout_s: float = READ_TIMEOUT_S) -> FastAPI:
    """The HTTP app serving ``engine`` under the name ``model_name``; ``card`` (the model's
    ``rstar2.json``, how it was trained to be prompted) goes into its ``/v1/models`` entry.
    ``limits``: what requests may ask (default: sized to the engine); ``weights``: whether and
    from where ``/update_weights_from_disk`` loads (default: off); ``read_timeout_s``: how long
    a client may take to send a request's headers, then its body (``rstar2.service``)."""
    limits = limits or ServeLimits()
    weights = weights or WeightUpdates()
    admission = Admission(Limits.sized(limits, engine))
    share = FairShare(engine, admission.limits)
    app = guard(FastAPI(title="rstar2 model server"),
                max_body_bytes=int(limits.max_request_mb * MIB), validation_status=400,
                read_timeout_s=read_timeout_s)
    tokenizer = engine.tokenizer

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        entry = {"id": model_name, "object": "model", "owned_by": "rstar2"}
        return {"object": "list", "data": [entry | ({"rstar2": card} if card else {})]}

    @app.get("/metrics")
    async def metrics() -> Response:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(LoadCollector(engine, model_name, share))
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(body: WeightsRequest,
                                       authorization: str | None = Header(None)) -> dict:
        weights.authorize(authorization)
        state = await asyncio.to_thread(read_weights, weights.folder(body.model_path))
        check_matches(engine.model, state)
        if share.busy:  # between two turns of a request the engine itself may be idle
            raise ServiceError("cannot load weights now: requests are in flight", 409)
        try:
            await engine.update_weights(state)
        except RuntimeError as exc:  # requests in flight
            raise ServiceError(f"cannot load weights now: {exc}", 409) from exc
        return {"success": True, "message": f"loaded {len(state)} tensors"}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> dict:
        if body.stream:
            raise ServiceError("streaming is not supported")
        if body.model is not None and body.model != model_name:
            raise ServiceError(f"unknown model {body.model!r}; this server has {model_name!r}")
        batch = prompt_batch(body.prompt)
        admission.check_request(body.n, body.max_tokens, [p for p in batch if isinstance(p, str)],
                                len(batch))
        prompts = (await asyncio.to_thread(tokenized, batch, tokenizer)
                   if any(isinstance(p, str) for p in batch) else batch)
        with admission.reserved(admission.cost(prompts, body.n, body.max_tokens)):
            copies = [p for p in prompts for _ in range(body.n)]
            try:
                outputs = await share.generate(copies, sampling_params(body))
            except ValueError as exc:
                raise ServiceError(str(exc)) from exc
        choices = [choice(i, out, copies[i], body, tokenizer) for i, out in enumerate(outputs)]
        completion_tokens = sum(len(o.token_ids) for o in outputs)
        prompt_tokens = sum(map(len, prompts))
        return {
            "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
            "created": int(time.time()), "model": model_name, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    return app


def prompt_batch(prompt) -> list[str | list[int]]:
    """The request's prompts, each a text or a token-id list."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise ServiceError("prompt is empty")
    if all(isinstance(t, int) for t in prompt):
        return [list(prompt)]
    return list(prompt)


def tokenized(batch: list[str | list[int]], tokenizer) -> list[list[int]]:
    """Token ids of every prompt (text is tokenised without special tokens added, as it
    already carries whatever the chat template put there). Run in a thread: long text takes
    a while."""
    return [tokenizer.encode(p, add_special_tokens=False) if isinstance(p, str) else p
            for p in batch]


def sampling_params(body: CompletionRequest) -> SamplingParams:
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    stop_ids = tuple(body.stop_token_ids) if body.stop_token_ids is not None else None
    if body.ignore_eos:
        stop_ids = stop_ids or ()
    return SamplingParams(temperature=body.temperature, top_p=body.top_p,
                          max_tokens=body.max_tokens, stop_token_ids=stop_ids, stop=stop,
                          seed=body.seed)


def choice(index: int, out: Completion, prompt: list[int], body: CompletionRequest,
           tokenizer) -> dict:
    result = {"index": index, "text": tokenizer.decode(out.token_ids, skip_special_tokens=True),
              "finish_reason": out.finish_reason, "logprobs": None}
    if body.return_token_ids:
        result["token_ids"] = out.token_ids
        result["prompt_token_ids"] = prompt
    if body.logprobs is not None:
        if body.return_tokens_as_token_ids:
            tokens = [f"token_id:{t}" for t in out.token_ids]
        else:
            tokens = [tokenizer.decode([t]) for t in out.token_ids]
        offsets, position = [], 0
        for token in tokens:
            offsets.append(position)
            position += len(token)
        result["logprobs"] = {"tokens": tokens, "token_logprobs": out.logprobs,
                              "top_logprobs": None, "text_offset": offsets}
    return result
