"""A stand-in for vLLM (see ../README.md): ``AsyncEngineArgs``, ``AsyncLLMEngine`` (vLLM's
``AsyncLLM``) and ``SamplingParams``, exactly the subset rstar2's adapters call, backed by a real
``HFEngine``. Requests return ``RequestOutput``-shaped objects; ``collective_rpc`` runs a
callable or a worker method on the one worker, whose ``model_runner.model`` loads weights by
name; the worker's weight-transfer methods receive over a gloo group (vLLM: NCCL)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from vllm.v1.metrics.reader import FakeCounter, FakeGauge, FakeHistogram

LIVE_ENGINES: list[FakeAsyncLLM] = []  # what vLLM's Prometheus registry would hold
BLOCK_SIZE = 16


@dataclass
class FakeAsyncEngineArgs:
    model: str
    dtype: str = "auto"
    seed: int = 0
    logprobs_mode: str = "raw_logprobs"
    enable_prefix_caching: bool | None = None
    weight_transfer_config: Any = None
    max_num_seqs: int | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    distributed_executor_backend: str | None = None


@dataclass
class FakeSamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = 16
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    logprobs: int | None = None
    detokenize: bool = True
    seed: int | None = None


@dataclass
class FakeLogprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class FakeCompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, FakeLogprob]] | None
    finish_reason: str | None


@dataclass
class FakeRequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[FakeCompletionOutput]
    finished: bool = True


class FakeModel:
    """A worker's model: ``load_weights`` takes (name, tensor) pairs by the trainer's names."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def load_weights(self, weights) -> set[str]:
        params = self.model.state_dict()
        loaded = set()
        with torch.no_grad():
            for name, tensor in weights:
                if name not in params:
                    raise KeyError(f"no parameter {name}")
                params[name].copy_(tensor)
                loaded.add(name)
        return loaded

    def state_dict(self):
        return self.model.state_dict()


class FakeWorker:
    """The one worker: its model, and the worker side of the weight transfer."""

    def __init__(self, model: torch.nn.Module, transfer_config):
        self.model_runner = SimpleNamespace(model=FakeModel(model))
        self.transfer_config, self.group, self.updating = transfer_config, None, False

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        from vllm.distributed.weight_transfer import fake_open_group
        from vllm.distributed.weight_transfer.nccl_engine import FakeNCCLWeightTransferInitInfo

        if self.transfer_config is None:
            raise RuntimeError("the engine was built without weight_transfer_config")
        info = FakeNCCLWeightTransferInitInfo(**init_info)
        self.group = fake_open_group(info.master_address, info.master_port, info.rank_offset,
                                     info.world_size)

    def start_weight_update(self) -> None:
        self.updating = True

    def update_weights(self, update_info: dict) -> None:
        from vllm.distributed.weight_transfer import fake_broadcast
        from vllm.distributed.weight_transfer.nccl_engine import FakeNCCLWeightTransferUpdateInfo

        if not self.updating or self.group is None:
            raise RuntimeError("update_weights before init_weight_transfer_engine/start_weight_update")
        info = FakeNCCLWeightTransferUpdateInfo(**update_info)
        for name, dtype, shape in zip(info.names, info.dtype_names, info.shapes):
            tensor = torch.empty(shape, dtype=getattr(torch, dtype))
            fake_broadcast(self.group, tensor)
            self.model_runner.model.load_weights([(name, tensor)])

    def finish_weight_update(self) -> None:
        if not self.updating:
            raise RuntimeError("finish_weight_update without start_weight_update")
        self.updating = False


class FakeAsyncLLM:
    """vLLM's ``AsyncLLM`` over an ``HFEngine``."""

    def __init__(self, args: FakeAsyncEngineArgs):
        from rstar2.engines.hf import HFEngine, HFEngineConfig

        if args.logprobs_mode != "processed_logprobs":
            raise NotImplementedError("the stand-in samples processed log-probs only")
        if args.tensor_parallel_size != 1:
            raise NotImplementedError("the stand-in has one worker")
        dtype = "float32" if args.dtype == "auto" else args.dtype
        self.engine = HFEngine(HFEngineConfig(model=args.model, dtype=dtype, seed=args.seed,
                                              max_batch_size=args.max_num_seqs or 32, device="cpu"))
        self.worker = FakeWorker(self.engine.model, args.weight_transfer_config)
        self.vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(world_size=1))
        LIVE_ENGINES.append(self)

    @classmethod
    def from_engine_args(cls, args: FakeAsyncEngineArgs) -> FakeAsyncLLM:
        return cls(args)

    async def generate(self, prompt, sampling_params: FakeSamplingParams, request_id: str):
        from rstar2.engines.base import SamplingParams

        sp = sampling_params
        if sp.stop_token_ids and not sp.ignore_eos:
            raise NotImplementedError("the stand-in stops at either EOS or the given ids")
        params = SamplingParams(temperature=sp.temperature, top_p=sp.top_p,
                                max_tokens=sp.max_tokens, stop=tuple(sp.stop or ()),
                                stop_token_ids=tuple(sp.stop_token_ids or ()) if sp.ignore_eos else None,
                                seed=sp.seed)
        ids = list(prompt["prompt_token_ids"])
        [done] = await self.engine.generate([ids], params)
        logprobs = None
        if sp.logprobs is not None:
            logprobs = [{t: FakeLogprob(lp, rank=1)} for t, lp in zip(done.token_ids, done.logprobs)]
        text = self.engine.tokenizer.decode(done.token_ids) if sp.detokenize else ""
        yield FakeRequestOutput(request_id, ids, [FakeCompletionOutput(
            0, text, done.token_ids, sum(done.logprobs), logprobs, done.finish_reason)])

    async def collective_rpc(self, method, timeout: float | None = None, args: tuple = (),
                             kwargs: dict | None = None) -> list:
        kwargs = kwargs or {}
        if callable(method):
            return [await asyncio.to_thread(method, self.worker, *args, **kwargs)]
        return [await asyncio.to_thread(getattr(self.worker, method), *args, **kwargs)]

    async def reset_prefix_cache(self, reset_running_requests: bool = False,
                                 reset_connector: bool = False) -> bool:
        await self.engine.update_weights({})  # drops every cached key/value
        return True

    async def init_weight_transfer_engine(self, request) -> None:
        await self.collective_rpc("init_weight_transfer_engine",
                                  kwargs={"init_info": request.init_info})

    async def start_weight_update(self) -> None:
        await self.collective_rpc("start_weight_update")

    async def update_weights(self, request) -> None:
        await self.collective_rpc("update_weights", kwargs={"update_info": request.update_info})

    async def finish_weight_update(self) -> None:
        await self.collective_rpc("finish_weight_update")

    def metrics(self) -> list:
        load = self.engine.load()
        blocks = load.kv_capacity_tokens // BLOCK_SIZE
        labels = {"engine": "0", "model_name": "fake"}
        return [
            FakeGauge("vllm:cache_config_info", {"engine": "0", "block_size": str(BLOCK_SIZE),
                                                  "num_gpu_blocks": str(blocks)}, 1.0),
            FakeGauge("vllm:kv_cache_usage_perc", labels,
                      load.kv_used_tokens / max(blocks * BLOCK_SIZE, 1)),
            FakeGauge("vllm:num_requests_running", labels, float(load.running)),
            FakeGauge("vllm:num_requests_waiting", labels, float(load.waiting)),
            FakeCounter("vllm:num_preemptions", labels, load.preemptions),
            FakeCounter("vllm:generation_tokens", labels, load.generation_tokens),
            FakeHistogram("vllm:inter_token_latency_seconds", labels, load.inter_tokens,
                          load.inter_token_seconds, {"+Inf": load.inter_tokens}),
            FakeHistogram("vllm:e2e_request_latency_seconds", labels, 0, 0.0, {"+Inf": 0}),
        ]

    def shutdown(self) -> None:
        if self in LIVE_ENGINES:
            LIVE_ENGINES.remove(self)
        self.engine.shutdown()


AsyncEngineArgs = FakeAsyncEngineArgs
AsyncLLMEngine = FakeAsyncLLM
SamplingParams = FakeSamplingParams
