"""``FakeAsyncLLM``: vLLM's own ``AsyncLLM`` class with its engine core swapped for one that runs
on the CPU (a real ``HFEngine`` on the embedded model, and ``FakeWorker``s).

It is a subclass of the real ``AsyncLLM``, so every method rstar2 calls that the stand-in does
not override (``collective_rpc``, ``reset_prefix_cache``, ``compute_weight_checksums``, the
weight-transfer steps, ``pause_generation``, ``shutdown``, ...) is vLLM's own code, with vLLM's
signature. Those methods talk to the engine core through ``FakeCoreClient``, a subclass of
vLLM's ``AsyncMPClient`` whose only change is the wire: every utility call is encoded with
vLLM's ``MsgpackEncoder``, decoded on the core side with ``MsgpackDecoder``, dispatched the way
``EngineCoreProc`` does it (``_convert_msgspec_args``), and its result goes back as an encoded
``EngineCoreOutputs``; so an argument real vLLM cannot serialise (a function, a tensor without
``VLLM_ALLOW_INSECURE_SERIALIZATION``) fails here too, and one it would mangle arrives mangled.

``generate`` is the stand-in's own (vLLM's needs its input and output processors): it takes
vLLM's ``SamplingParams`` and ``TokensPrompt``, samples with the ``HFEngine``, and returns vLLM's
``RequestOutput``/``CompletionOutput`` with log-probs built by vLLM's own
``append_logprobs_for_next_position``. Its signature is the real one (the contract tests check).
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.v1.engine import EngineCoreOutputs, UtilityOutput
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.core import EngineCoreProc
from vllm.v1.engine.core_client import AsyncMPClient, _process_utility_output
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder, UtilityResult, run_method

from tests.fakes.vllm_cpu.metrics import register_metrics
from tests.fakes.vllm_cpu.worker import worker_class

IDLE_POLL_S = 0.005


class FakeEngineCore:
    """The utilities of vLLM's ``EngineCore`` that rstar2 reaches, over the stand-in's workers.
    ``calls`` records every utility call as it arrived (decoded), for tests."""

    def __init__(self, engine, workers):
        self.engine, self.workers = engine, workers
        self.running = 0  # requests being generated
        self.paused = self.rejecting = self.aborting = False
        self.preempted = 0  # running requests reset_prefix_cache(reset_running_requests=True) hit
        self.weight_version = "default"
        self.calls: list[tuple[str, list]] = []
        self.request_decoder = MsgpackDecoder()
        self.output_encoder = MsgpackEncoder()
        self.closed = False

    async def handle_utility(self, frames) -> list:
        """One utility request off the wire, answered on the wire (see the module docstring)."""
        client_index, call_id, method_name, args = self.request_decoder.decode(frames)
        self.calls.append((method_name, args))
        output = UtilityOutput(call_id)
        try:
            method = getattr(self, method_name)
            result = method(*EngineCoreProc._convert_msgspec_args(method, args))
            if asyncio.iscoroutine(result):
                result = await result
            output.result = UtilityResult(result)
        except Exception as exc:  # noqa: BLE001 - vLLM returns the failure to the caller
            output.failure_message = f"Call to {method_name} method failed: {exc}"
        return self.output_encoder.encode(EngineCoreOutputs(utility_output=output))

    async def until_idle(self) -> None:
        while self.running:
            await asyncio.sleep(IDLE_POLL_S)

    # ------------------------------------------------ EngineCore's utility methods
    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None) -> list:
        """Every worker at once (vLLM's workers are processes; they meet in collectives)."""
        return list(await asyncio.gather(*[
            asyncio.to_thread(run_method, worker, method, tuple(args), kwargs or {})
            for worker in self.workers]))

    async def reset_prefix_cache(self, reset_running_requests: bool = False,
                                 reset_connector: bool = False) -> bool:
        """vLLM's answer: False while requests run (their blocks stay), unless they are
        preempted; the stand-in cannot recompute a running request, so it lets it end."""
        if self.running and not reset_running_requests:
            return False
        if self.running:
            self.preempted += self.running
            await self.until_idle()
        await self.engine.update_weights({})  # the HFEngine drops every cached key/value
        return True

    async def compute_weight_checksums(self) -> list[dict[str, str]]:
        return await self.collective_rpc("compute_weight_checksums")

    async def pause_generation(self, mode: str = "abort", clear_cache: bool = True) -> None:
        if mode not in ("abort", "wait", "keep"):
            raise ValueError(f"Invalid pause mode: {mode}")
        self.paused, self.rejecting, self.aborting = True, mode != "keep", mode == "abort"
        if mode != "keep":
            await self.until_idle()
            if clear_cache:
                await self.engine.update_weights({})

    def resume_scheduler(self) -> None:
        self.paused = self.rejecting = self.aborting = False

    def is_scheduler_paused(self) -> bool:
        return self.paused

    def set_weight_version(self, weight_version: str) -> None:
        self.weight_version = weight_version

    def get_weight_version(self) -> str:
        return self.weight_version

    def shutdown(self) -> None:
        if not self.closed:
            self.closed = True
            self.engine.shutdown()


class FakeCoreClient(AsyncMPClient):
    """vLLM's ``AsyncMPClient`` with no engine process: its utility calls go over the wire
    format to ``FakeEngineCore`` in this process (see the module docstring)."""

    def __init__(self, core: FakeEngineCore):  # no super().__init__: no sockets, no processes
        self.core = core
        self.client_index = 0
        self.core_engine = b"\x00\x00"
        self.core_engines = [self.core_engine]
        self.encoder = MsgpackEncoder()
        self.decoder = MsgpackDecoder(EngineCoreOutputs)
        self.utility_results = {}

    async def _call_utility_async(self, method: str, *args, engine) -> object:
        call_id = uuid.uuid1().int >> 64
        future = asyncio.get_running_loop().create_future()
        self.utility_results[call_id] = future
        answer = await self.core.handle_utility(
            self.encoder.encode((self.client_index, call_id, method, args)))
        _process_utility_output(self.decoder.decode(answer).utility_output, self.utility_results)
        return await future

    def shutdown(self, timeout: float | None = None) -> None:
        self.core.shutdown()


class FakeRenderer:
    async def clear_mm_cache_async(self) -> None:
        """(No multi-modal cache on the stand-in.)"""

    def shutdown(self) -> None:
        """(Nothing to stop.)"""


class FakeAsyncLLM(AsyncLLM):
    """vLLM's ``AsyncLLM`` over ``FakeEngineCore``; see the module docstring."""

    def __init__(self, args: AsyncEngineArgs):  # not vLLM's constructor: no GPU engine
        from vllm.config import ParallelConfig

        from rstar2.engines.hf import HFEngine, HFEngineConfig

        if not isinstance(args, AsyncEngineArgs):
            raise TypeError(f"AsyncLLM takes vLLM's AsyncEngineArgs, not {type(args).__name__}")
        if args.logprobs_mode != "processed_logprobs":
            raise NotImplementedError("the stand-in samples processed log-probs only")
        tensor_parallel = args.tensor_parallel_size
        dtype = "float32" if args.dtype == "auto" else args.dtype
        engine = HFEngine(HFEngineConfig(model=args.model, dtype=dtype, seed=args.seed,
                                         max_batch_size=args.max_num_seqs or 32, device="cpu"))
        worker = worker_class(args.worker_extension_cls)
        configs = [SimpleNamespace(model_config=None, parallel_config=ParallelConfig(
                       tensor_parallel_size=tensor_parallel, rank=rank))
                   for rank in range(tensor_parallel)]
        workers = [worker(engine.model, config, args.weight_transfer_config, rank)
                   for rank, config in enumerate(configs)]
        self.engine = engine
        self.core = FakeEngineCore(engine, workers)
        self.engine_core = FakeCoreClient(self.core)
        self.renderer = FakeRenderer()
        self.vllm_config = SimpleNamespace(
            parallel_config=ParallelConfig(tensor_parallel_size=tensor_parallel))
        self.output_handler = None
        self.log_requests = False
        register_metrics(self)

    @classmethod
    def from_engine_args(cls, engine_args, start_engine_loop=True, usage_context=None,
                         stat_loggers=None):
        return cls(engine_args)

    async def generate(self, prompt, sampling_params, request_id, *, prompt_text=None,
                       lora_request=None, tokenization_kwargs=None, trace_headers=None,
                       priority=0, data_parallel_rank=None, session_id=None, kv_hints=None,
                       reasoning_ended=None, reasoning_parser_kwargs=None):
        from vllm.sampling_params import SamplingParams

        if not isinstance(sampling_params, SamplingParams):
            raise TypeError("generate takes vLLM's SamplingParams")
        if self.core.rejecting:
            raise RuntimeError("the engine is paused and refuses new requests")
        ids = list(prompt["prompt_token_ids"])
        self.core.running += 1
        try:
            [done] = await self.engine.generate([ids], rstar2_params(sampling_params))
            reason = "abort" if self.core.aborting else done.finish_reason
        finally:
            self.core.running -= 1
        yield request_output(request_id, ids, done, reason, sampling_params, self.engine.tokenizer)


def rstar2_params(sp):
    """rstar2's ``SamplingParams`` for vLLM's (as the stand-in's HFEngine samples)."""
    from rstar2.engines.base import SamplingParams

    if sp.stop_token_ids and not sp.ignore_eos:
        raise NotImplementedError("the stand-in stops at either EOS or the given ids")
    stop_ids = tuple(sp.stop_token_ids or ()) if sp.ignore_eos else None
    return SamplingParams(temperature=sp.temperature, top_p=sp.top_p, max_tokens=sp.max_tokens,
                          stop=tuple(sp.stop or ()), stop_token_ids=stop_ids, seed=sp.seed)


def request_output(request_id: str, prompt_ids: list[int], done, reason: str, sp, tokenizer):
    """vLLM's ``RequestOutput`` of one finished request, log-probs as vLLM records them."""
    from vllm.logprobs import append_logprobs_for_next_position, create_sample_logprobs
    from vllm.outputs import CompletionOutput, RequestOutput

    logprobs = None
    if sp.logprobs is not None:
        logprobs = create_sample_logprobs(sp.flat_logprobs)
        for token, value in zip(done.token_ids, done.logprobs):
            append_logprobs_for_next_position(logprobs, [token], [value], [None], 1, 0)
    text = tokenizer.decode(done.token_ids) if sp.detokenize else ""
    sample = CompletionOutput(index=0, text=text, token_ids=list(done.token_ids),
                              cumulative_logprob=sum(done.logprobs), logprobs=logprobs,
                              finish_reason=reason)
    return RequestOutput(request_id=request_id, prompt=None, prompt_token_ids=prompt_ids,
                         prompt_logprobs=None, outputs=[sample], finished=True)
