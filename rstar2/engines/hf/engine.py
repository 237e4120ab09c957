"""``HFEngine``: the queue, the futures and the steps that serve them, each step admitting
waiting requests and decoding one token of every active sequence (the package docstring says
what is cached and why). The parts it drives: the slot table (``table``), the KV budget
(``kv``), the model's passes (``compute``) and the choice of the next tokens (``sampling``).

Steps run on the event loop of the code that submits work, one step at a time with the loop
free in between: a task started by the first ``submit`` steps while anything is queued or
decoding, then ends. Not on a thread of its own because PyTorch's CPU kernels use OpenMP,
which gives every thread that runs a parallel region its own pool of helper threads, and a
process holding more of them than it has cores makes libgomp stop spinning between regions:
with the engine on one thread and the model loading, the learner and the trainer on another,
every one of a decode step's hundreds of small regions waited on a sleeping thread
(docs/benchmarks.md has the cost). On the caller's loop every model in the process
computes on one thread, and the loop still serves tool calls, reward calls and HTTP requests
between steps.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
import time
from collections.abc import Mapping, Sequence

import torch

from rstar2.engines import slots
from rstar2.engines.base import Completion, EngineLoad, PauseMode, SamplingParams
from rstar2.engines.hf.compute import Compute
from rstar2.engines.hf.config import HFEngineConfig
from rstar2.engines.hf.kv import KVBudget
from rstar2.engines.hf.requests import Request, Resident, resolve
from rstar2.engines.hf.sampling import draw, finish_reason
from rstar2.engines.hf.table import Placed, SlotTable
from rstar2.models.cpu_share import ThreadGovernor
from rstar2.models.device import resolve_device
from rstar2.models.loading import load_model, load_tokenizer, set_cpu_threads


AHEAD = 512
"""Generated tokens a request's slot has room for when it is admitted: a whole short answer
(no growth while it decodes), while a long budget grows the cache as it is used."""

FUSED_PREFILL = 256
"""Most new tokens a sequence may bring to a fused step (a tool's output, a prompt after its
shared block). The fused attention reads a sequence's keys once per new token, which beats
the model's forward pass on a turn's few hundred tokens and loses to it on a long prompt."""


class HFEngine:
    """Embedded transformers engine; see the package docstring."""

    def __init__(self, config: HFEngineConfig | None = None, *, model=None, tokenizer=None):
        self.config = config = config or HFEngineConfig()
        device = model.device if model is not None else resolve_device(config.device)
        self.governor: ThreadGovernor | None = None  # CPU threads by what other processes leave
        if device.type == "cpu":
            set_cpu_threads()
            self.governor = ThreadGovernor.for_this_process(torch.get_num_threads())
        self.model = model if model is not None else load_model(config.model, config.dtype, device)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(config.model)
        slots.install(self.model)
        cfg = self.model.config
        # transformers configs name these differently per architecture; absent means derived
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.max_length = getattr(cfg, "max_position_embeddings", 1 << 30)
        self.device = self.model.device
        flat = config.attention == "flat" or (config.attention == "auto" and self.device.type != "cpu")
        if not flat and self.device.type != "cpu":
            raise ValueError("attention 'cascade' needs the CPU; use 'flat' or 'auto' on a GPU")
        # cascade attention (the CPU's) maps every slot the table may fill, each as long as the
        # context: address space until keys are written (SlotCache); flat attention's steps read
        # whole length buckets, so its cache grows to them
        capacity = None if flat else (config.slots, self.max_length)
        cache = slots.SlotCache(cfg.num_hidden_layers, cfg.num_key_value_heads, head_dim,
                                self.model.dtype, self.device, spare=int(flat), capacity=capacity)
        self.table = SlotTable(config, cache)
        self.compute = Compute(self.model, self.table, flat, config.max_batch_size,
                               config.prefill_tokens, config.cuda_graphs, config.decode_kernels)
        self.kv = KVBudget(config.kv_budget_tokens or config.max_batch_size * self.max_length)
        self.eos_ids = frozenset(model_eos_ids(self.model, self.tokenizer))
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.weight_version: int | None = None  # stamped on every completion
        self.queue: collections.deque[Request] = collections.deque()
        self.lock = threading.Lock()  # the queue, ``stepper`` and ``closing``
        self.step_lock = threading.Lock()  # a step, a weight load or a shutdown at a time
        self.closing = False
        self.stepper: asyncio.Task | None = None  # the task stepping, while there is work
        self.paused: PauseMode | None = None  # ``pause``'s mode until ``resume``
        self.busy_s = 0.0
        self.generation_tokens = self.inter_tokens = 0  # decode counters, as vLLM's
        self.inter_token_seconds = 0.0

    # ----------------------------------------------------------------- public side
    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams
                       ) -> list[Completion]:
        futures = [asyncio.wrap_future(f) for f in self.submit(prompts, params)]
        return list(await asyncio.gather(*futures))

    def submit(self, prompts: Sequence[Sequence[int]], params: SamplingParams
               ) -> list[concurrent.futures.Future]:
        """Queue prompts (all or none); each future resolves to its ``Completion``. Called
        from a running event loop, on which the steps then run (module docstring)."""
        stops = self.eos_ids if params.stop_token_ids is None else frozenset(params.stop_token_ids)
        requests = [Request(self.checked(p), params, stops, concurrent.futures.Future(),
                            min(len(p) + params.max_tokens, self.max_length)) for p in prompts]
        loop = asyncio.get_running_loop()  # before queueing: without a loop, nothing is queued
        with self.lock:
            if self.closing:
                raise RuntimeError("engine is closed")
            self.queue.extend(requests)
            self.start_stepping(loop)
        return [r.future for r in requests]

    def start_stepping(self, loop: asyncio.AbstractEventLoop) -> None:
        """A stepping task on ``loop`` unless one runs or the engine is paused (under ``lock``)."""
        if self.paused is None and (self.stepper is None or self.stepper.done()):
            self.stepper = loop.create_task(self.steps(), name="hf-engine steps")

    def checked(self, prompt: Sequence[int]) -> list[int]:
        prompt = [int(t) for t in prompt]
        vocab = self.model.config.vocab_size
        if not prompt:
            raise ValueError("prompt is empty")
        if min(prompt) < 0 or max(prompt) >= vocab:
            raise ValueError(f"prompt has token ids outside the vocabulary [0, {vocab})")
        if len(prompt) >= self.max_length:
            raise ValueError(f"prompt of {len(prompt)} tokens exceeds the model's "
                             f"{self.max_length}-token context")
        return prompt

    def limit_threads(self, threads: int) -> None:
        """Compute with at most ``threads`` CPU threads from now on (asynchronous training
        leaves the rest to the learner); fewer while other processes keep cores busy."""
        if self.governor is not None:
            self.governor.most = threads
            self.governor.current = min(self.governor.current, threads)
        torch.set_num_threads(threads)

    def samples_from(self, model: object) -> bool:
        return self.model is model

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def load(self) -> EngineLoad:
        """KV capacity and use, queue, busy time and decode counters, as the last step left
        them."""
        return EngineLoad(kv_capacity_tokens=self.kv.capacity, kv_used_tokens=self.kv.used,
                          kv_peak_tokens=self.kv.peak, running=self.table.n_active,
                          waiting=len(self.queue), busy_s=self.busy_s,
                          generation_tokens=self.generation_tokens,
                          inter_token_seconds=self.inter_token_seconds,
                          inter_tokens=self.inter_tokens)

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor],
                             version: int | None = None) -> None:
        """Load new weights (e.g. after an RL step), stamped ``version``, and drop the cached
        keys/values no running sequence reads: all of them, unless paused with 'keep'
        (``pause``), when the running sequences keep theirs."""
        with self.step_lock:
            if self.paused is None and (self.table.n_active or self.queue):
                raise RuntimeError("update_weights while requests are in flight (pause first)")
            self.model.load_state_dict(state_dict, strict=False)
            self.compute.weights_changed()
            self.weight_version = version
            if self.table.n_active:
                self.table.drop_parked()
            else:
                self.drop_caches()

    async def pause(self, mode: PauseMode) -> None:
        """Stop stepping until ``resume`` (``engines.base.PausableEngine``): 'keep' leaves the
        running sequences where they are; 'abort' ends them now ('abort', with the tokens
        sampled so far) and forgets every cached key/value."""
        with self.step_lock:  # between two steps
            self.paused = mode
            if mode == "abort":
                for r in self.table.active:
                    self.kv.release(r.request)
                    resolve(r.request.future, r.completion("abort"))
                self.table.drop()
                self.kv.measure([])

    async def resume(self) -> None:
        with self.lock:
            self.paused = None
            if self.queue or self.table.n_active:
                self.start_stepping(asyncio.get_running_loop())

    async def release_cache(self) -> None:
        """Free the slot cache and the shared blocks (``TrainableEngine.release_cache``); the
        next request allocates them again."""
        with self.step_lock:
            if self.table.n_active or self.queue:
                raise RuntimeError("release_cache while requests are in flight")
            self.drop_caches()
            self.kv.measure([])

    def drop_caches(self) -> None:
        """Forget every cached key/value: parked sequences and shared blocks."""
        self.table.drop()

    async def close(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Stop stepping and fail every queued and running request ('engine closed')."""
        with self.lock:
            self.closing = True
            waiting, self.queue = list(self.queue), collections.deque()
        with self.step_lock:  # a step in progress on another thread finishes first
            active = [r.request for r in self.table.active if r.request]
        for request in waiting + active:
            resolve(request.future, exception=RuntimeError("engine closed"))

    # ----------------------------------------------------------------- the steps
    async def steps(self) -> None:
        """Step while there is work, giving the loop its turn between steps."""
        try:
            while True:
                with self.lock:
                    if self.closing or self.paused or not (self.queue or self.table.n_active):
                        return
                    admitted = self.kv.admissible(self.queue, self.table.n_active,
                                                  self.config.max_batch_size)
                self.step(admitted)
                await asyncio.sleep(0)
        finally:
            with self.lock:
                if self.stepper is asyncio.current_task():
                    self.stepper = None
            # the thread count is the process's: what runs next in it (a colocated trainer's
            # update, an SFT) gets every thread it may use, not the count of the last busy moment
            if self.governor is not None and torch.get_num_threads() != self.governor.most:
                torch.set_num_threads(self.governor.most)

    def step(self, admitted: list[Request]) -> None:
        """Prefill ``admitted`` and decode one token of every active sequence."""
        if self.governor is not None:
            wanted = self.governor.threads()
            if wanted != torch.get_num_threads():
                torch.set_num_threads(wanted)
        started = time.perf_counter()
        decoded = 0
        with self.step_lock:
            try:
                with torch.inference_mode():
                    decoded = self.table.n_active
                    placed = self.place(admitted) if admitted else None
                    if placed is not None and self.fuses(placed):
                        self.fused_step(placed)
                    else:
                        if placed is not None:
                            self.prefill(placed)
                            decoded = self.table.n_active
                        if self.table.n_active:
                            self.accept(self.table.active, self.compute.decode())
            except Exception as exc:  # fail the affected requests, keep serving
                self.fail_in_flight(exc, admitted)
            self.kv.measure(self.table.active)
        elapsed = time.perf_counter() - started
        self.busy_s += elapsed
        # each decoded token waited this whole step since its sequence's last one
        self.generation_tokens += len(admitted) + decoded
        self.inter_token_seconds += elapsed * decoded
        self.inter_tokens += decoded

    def place(self, requests: list[Request]) -> Placed:
        """Give each request a slot (``SlotTable.place``). The slot cache is grown once for
        all of them: a slot each, and the length their prompts and up to ``AHEAD`` generated
        tokens reach (within their budgets)."""
        reach = max(min(r.footprint, len(r.prompt) + AHEAD) for r in requests)
        self.table.cache.reserve(min(len(self.table.residents) + len(requests), self.config.slots), reach)
        return self.table.place(requests, self.compute.compute_block)

    def fuses(self, placed: Placed) -> bool:
        """Whether the new tokens of ``placed`` ride along this step's fused decode pass: on
        the fused kernels, when each sequence brings at most ``FUSED_PREFILL`` of them."""
        return self.compute.stack is not None and all(
            len(r.pending) <= FUSED_PREFILL for r in placed.reps)

    def fused_step(self, placed: Placed) -> None:
        """One fused pass: a token of every sequence already decoding and the new tokens of
        the admitted ones; identical new prompts are computed once and copied after."""
        rows = self.table.active
        originals = {id(copy): original for copy, original in placed.copies}
        computed = [(slot, r) for slot, r in enumerate(rows) if id(r) not in originals]
        logits = self.compute.fused(computed)
        self.table.copy_twins(placed.copies)
        where = {id(r): i for i, (_, r) in enumerate(computed)}
        self.accept(rows, logits[[where[id(originals.get(id(r), r))] for r in rows]])

    def prefill(self, placed: Placed) -> None:
        """Prefill what is new in ``placed`` through the model's forward pass and sample each
        one's first token."""
        if self.compute.flat:
            for resident in placed.reps:
                self.table.inline_block(resident)
        logits = self.compute.prefill(placed.first, len(placed.reps))
        self.table.copy_twins(placed.copies)
        self.accept(placed.rows, logits[placed.picks])

    def accept(self, rows: list[Resident], logits: torch.Tensor) -> None:
        """Sample each row's next token from its logits, then finish rows that are done."""
        self.table.clock += 1
        done = []
        for r, (token, logprob) in zip(rows, draw(rows, logits, self.generator, self.compute.kernels)):
            r.out_ids.append(token)
            r.out_logprobs.append(logprob)
            r.out_versions.append(self.weight_version)
            r.pending = [token]
            reason = finish_reason(r, self.tokenizer, self.max_length)
            if reason or r.request.future.cancelled():
                done.append((r, reason))
        for r, reason in sorted(done, key=lambda d: -self.table.residents.index(d[0])):
            self.finish(r, reason)

    def finish(self, r: Resident, reason: str | None) -> None:
        """Park ``r`` (its keys kept for its next turn), then deliver its completion: a caller
        woken by the completion sees the engine already settled."""
        request = r.request
        self.kv.release(request)
        self.table.park(r)
        if reason:
            resolve(request.future, r.completion(reason))

    def fail_in_flight(self, exc: Exception, admitted: list[Request]) -> None:
        in_flight = admitted + [r.request for r in self.table.active if r.request]
        for request in in_flight:
            resolve(request.future, exception=exc)
        self.table.drop()
        self.kv.reset()


def model_eos_ids(model, tokenizer) -> set[int]:
    """End-of-sequence ids from the generation config and the tokenizer (transformers models
    may lack a generation config, and either may leave the id unset)."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
