"""HFEngine: an embedded transformers model behind the ``Engine`` contract (CPU or GPU).

A worker thread runs continuous batching: every step it admits waiting requests into free
slots (prefilling only what is not already cached) and then decodes one token for every
active sequence, so a rollout whose tool call just returned joins the very next step instead
of waiting for the rest of its batch. The asyncio side only queues requests and awaits
futures, so tool calls and HTTP traffic keep flowing while the model computes.

What is cached (see ``slots``):

* *shared prefixes*: when several waiting prompts start with the same >= ``min_shared_prefix``
  tokens (the system prompt; the 2G copies of one question), that prefix is computed once as a
  ``PrefixBlock`` that all of them read; identical prompts are prefilled once and copied;
* *finished sequences* stay parked in their slot (up to ``max_parked``, least recently used
  evicted first); a new prompt that extends one -- the next turn of the same rollout, after
  its tool response -- resumes in that slot and prefills only the new tokens.

On a GPU (``attention``: flat) blocks are copied into the slots that read them, attention is
one fused SDPA call per layer, and decode steps are fixed-shape CUDA graphs
(``engines.bucketed``); the CPU keeps cascade attention over blocks read in place.

Sampling is per request (temperature, top-p, stop tokens/strings); log-probs follow
``engines.base``. As a ``TrainableEngine``, ``update_weights`` swaps in new weights between RL
steps and drops every cached KV, which the old weights computed; ``reseed`` restarts the
sampling generator.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from pydantic import BaseModel, Field

from rstar2.engines import slots
from rstar2.engines.base import Completion, EngineLoad, SamplingParams
from rstar2.engines.bucketed import BucketedDecoder
from rstar2.engines.device import DEVICE_HELP, DeviceSetting, resolve_device
from rstar2.engines.loading import load_model, load_tokenizer, set_cpu_threads
from rstar2.engines.sampling import request_uniform, sample_tokens


class HFEngineConfig(BaseModel):
    """The embedded engine's settings."""

    model: str = Field("default", description="'default' (SmolLM2-135M-Instruct), a .gguf file, "
                       "a local model directory or a Hugging Face hub id.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "bfloat16", description="Weights and KV dtype. bfloat16 is the faster on CPUs with "
        "bfloat16 instructions (docs/benchmarks.md); float32 for exact log-probs.")
    device: DeviceSetting = Field("auto", description="Where the model runs: "
                        + DEVICE_HELP + " Ignored when a model object is passed in (its own).")
    max_batch_size: int = Field(32, ge=1, description="Most sequences decoded together.")
    max_parked: int = Field(32, ge=0, description="Finished sequences kept for reuse by the "
                            "next turn of their rollout.")
    min_shared_prefix: int = Field(32, ge=1, description="Shortest common prefix of waiting "
                                   "prompts worth computing once as a shared block.")
    max_blocks: int = Field(8, ge=1, description="Shared prefix blocks kept (LRU).")
    prefill_tokens: int = Field(4096, ge=64, description="Padded tokens per prefill pass "
                                "(bounds prefill memory).")
    seed: int = Field(0, description="Seed of the sampling generator.")
    kv_budget_tokens: int | None = Field(None, ge=1, description="KV tokens the running "
                                         "requests may hold: a request is admitted only when its "
                                         "prompt plus max_tokens fits beside theirs, else it "
                                         "waits (never preempted). None: max_batch_size times "
                                         "the model's context.")
    attention: Literal["auto", "cascade", "flat"] = Field(
        "auto", description="'cascade': sequences read shared prefix blocks in place (CPU only); "
        "'flat': each slot holds a copy of its block and a decode step is one fixed-shape fused "
        "attention pass per layer (engines.bucketed); 'auto': cascade on CPU, flat on GPU.")
    cuda_graphs: bool = Field(True, description="With flat attention on CUDA: replay decode "
                              "steps as CUDA graphs captured per batch and length bucket.")


@dataclass(eq=False)
class Request:
    prompt: list[int]
    params: SamplingParams
    stop_ids: frozenset[int]
    future: concurrent.futures.Future
    footprint: int = 0  # KV tokens it may come to hold: prompt + max_tokens, within the context


@dataclass(eq=False)
class Resident:
    """A sequence that owns a slot: active while it has a request, parked after."""

    block: slots.PrefixBlock | None
    cached: list[int]  # tokens whose keys/values exist (block tokens first)
    pending: list[int] = field(default_factory=list)  # tokens to feed next
    request: Request | None = None
    out_ids: list[int] = field(default_factory=list)
    out_logprobs: list[float] = field(default_factory=list)
    last_used: int = 0

    @property
    def used(self) -> int:
        """Slot positions holding keys (the part of ``cached`` after the block)."""
        return len(self.cached) - (len(self.block) if self.block else 0)

    def start(self, request: Request) -> None:
        self.request = request
        self.pending = request.prompt[len(self.cached):]
        self.out_ids, self.out_logprobs = [], []


class HFEngine:
    """Embedded transformers engine; see the module docstring."""

    def __init__(self, config: HFEngineConfig | None = None, *, model=None, tokenizer=None):
        self.config = config or HFEngineConfig()
        device = model.device if model is not None else resolve_device(self.config.device)
        if device.type == "cpu":
            set_cpu_threads()
        self.model = model if model is not None else load_model(
            self.config.model, self.config.dtype, device)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(self.config.model)
        slots.install(self.model)
        cfg = self.model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.max_length = getattr(cfg, "max_position_embeddings", 1 << 30)
        self.device = self.model.device
        mode = self.config.attention
        self.flat = mode == "flat" or (mode == "auto" and self.device.type != "cpu")
        if not self.flat and self.device.type != "cpu":
            raise ValueError("attention 'cascade' needs the CPU; use 'flat' or 'auto' on a GPU")
        self.cache = slots.SlotCache(cfg.num_hidden_layers, cfg.num_key_value_heads, head_dim,
                                     self.model.dtype, self.device, spare=int(self.flat))
        self.decoder = BucketedDecoder(self.forward, self.cache, self.device,
                                       self.config.max_batch_size, self.config.cuda_graphs
                                       ) if self.flat else None
        self.no_mask = torch.zeros((1, 1, 1, 1), dtype=torch.bool, device=self.device)
        self.eos_ids = frozenset(model_eos_ids(self.model, self.tokenizer))
        self.generator = torch.Generator(device=self.device).manual_seed(self.config.seed)
        self.weight_version: int | None = None  # stamped on every completion
        self.residents: list[Resident] = []  # index = slot; the first n_active are active
        self.n_active = 0
        self.blocks: collections.OrderedDict[tuple[int, ...], slots.PrefixBlock] = (
            collections.OrderedDict())
        self.clock = 0
        self.queue: collections.deque[Request] = collections.deque()
        self.wake = threading.Condition()
        self.step_lock = threading.Lock()
        self.closing = False
        self.worker: threading.Thread | None = None
        self.kv_capacity = self.config.kv_budget_tokens or (
            self.config.max_batch_size * self.max_length)
        self.kv_reserved = 0  # footprints of the admitted requests
        self.kv_used = self.kv_peak = 0  # tokens held by active sequences (worker's last step)
        self.busy_s = 0.0

    # ----------------------------------------------------------------- public side
    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams
                       ) -> list[Completion]:
        futures = [asyncio.wrap_future(f) for f in self.submit(prompts, params)]
        return list(await asyncio.gather(*futures))

    def submit(self, prompts: Sequence[Sequence[int]], params: SamplingParams
               ) -> list[concurrent.futures.Future]:
        """Queue prompts (all or none); each future resolves to its ``Completion``."""
        stops = self.eos_ids if params.stop_token_ids is None else frozenset(params.stop_token_ids)
        requests = [Request(self.checked(p), params, stops, concurrent.futures.Future(),
                            min(len(p) + params.max_tokens, self.max_length)) for p in prompts]
        with self.wake:
            if self.closing:
                raise RuntimeError("engine is closed")
            self.queue.extend(requests)
            if self.worker is None:
                self.worker = threading.Thread(target=self.serve, name="hf-engine", daemon=True)
                self.worker.start()
            self.wake.notify()
        return [r.future for r in requests]

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

    def samples_from(self, model: object) -> bool:
        return self.model is model

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def load(self) -> EngineLoad:
        """KV capacity and use, queue and busy time, as the worker last left them."""
        return EngineLoad(kv_capacity_tokens=self.kv_capacity, kv_used_tokens=self.kv_used,
                          kv_peak_tokens=self.kv_peak, running=self.n_active,
                          waiting=len(self.queue), busy_s=self.busy_s)

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor],
                             version: int | None = None) -> None:
        """Load new weights (e.g. after an RL step), stamped ``version``, and drop all cached
        keys/values."""
        with self.step_lock:
            if self.n_active or self.queue:
                raise RuntimeError("update_weights while requests are in flight")
            self.model.load_state_dict(state_dict, strict=False)
            self.weight_version = version
            self.drop_caches()

    def drop_caches(self) -> None:
        self.residents, self.n_active = [], 0
        self.blocks.clear()
        self.cache.clear()

    async def close(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        with self.wake:
            self.closing = True
            self.wake.notify()
            waiting, self.queue = list(self.queue), collections.deque()
        if self.worker is not None:
            self.worker.join()
        active = [r.request for r in self.residents[: self.n_active] if r.request]
        for request in waiting + active:
            resolve(request.future, exception=RuntimeError("engine closed"))

    # ----------------------------------------------------------------- worker thread
    def serve(self) -> None:
        while True:
            with self.wake:
                while not self.queue and not self.n_active and not self.closing:
                    self.wake.wait()
                if self.closing:
                    break
                admitted = self.admissible()
            started = time.perf_counter()
            with self.step_lock:
                try:
                    with torch.inference_mode():
                        if admitted:
                            self.admit(admitted)
                        if self.n_active:
                            self.decode()
                except Exception as exc:  # fail the affected requests, keep serving
                    self.fail_in_flight(exc, admitted)
                self.kv_used = sum(len(r.cached) + len(r.pending)
                                   for r in self.residents[: self.n_active])
                self.kv_peak = max(self.kv_peak, self.kv_used)
            self.busy_s += time.perf_counter() - started

    def admissible(self) -> list[Request]:
        """Take queued requests, in order, while a batch row and their KV footprint are free
        (one request is always admitted into an idle engine, whatever its footprint)."""
        admitted = []
        while self.queue and self.n_active + len(admitted) < self.config.max_batch_size:
            request = self.queue[0]
            if request.future.cancelled():
                self.queue.popleft()
                continue
            busy = self.n_active or admitted
            if busy and self.kv_reserved + request.footprint > self.kv_capacity:
                break
            admitted.append(self.queue.popleft())
            self.kv_reserved += request.footprint
        return admitted

    def fail_in_flight(self, exc: Exception, admitted: list[Request]) -> None:
        in_flight = admitted + [r.request for r in self.residents[: self.n_active] if r.request]
        for request in in_flight:
            resolve(request.future, exception=exc)
        self.drop_caches()
        self.kv_reserved = 0

    # ----------------------------------------------------------------- admission
    def admit(self, requests: list[Request]) -> None:
        """Give each request a slot (resuming a parked sequence it extends, or reading the
        longest cached block), prefill what is new, and sample its first token."""
        self.share_prefix([r for r in requests if not isinstance(self.source(r.prompt), Resident)])
        reps, copies, first = [], [], self.n_active
        seen: dict[tuple, Resident] = {}
        for request in requests:
            source = self.source(request.prompt)
            if isinstance(source, Resident):
                resident = self.activate(self.residents.index(source))
            else:
                if source is not None:
                    self.blocks.move_to_end(source.tokens)  # least recently used goes first
                resident = Resident(block=source, cached=list(source.tokens) if source else [])
            resident.start(request)
            key = (id(resident.block), tuple(resident.pending)) if not resident.used else None
            if key is not None and key in seen:
                copies.append((resident, seen[key]))
                continue
            if key is not None:
                seen[key] = resident
            if resident not in self.residents:
                self.claim_slot(resident)
            reps.append(resident)
        for resident, _ in copies:
            self.claim_slot(resident)
        if self.flat:
            for resident in reps:
                self.inline_block(resident)
        logits = self.prefill(first, len(reps))
        for resident, original in copies:
            src, dst = self.residents.index(original), self.residents.index(resident)
            self.cache.reserve(len(self.residents), original.used)
            self.cache.copy(src, dst, original.used)
            resident.block = original.block
            resident.cached.extend(resident.pending)
            resident.pending = []
        rows = reps + [resident for resident, _ in copies]
        picks = [reps.index(original) for _, original in copies]
        self.accept(rows, logits[list(range(len(reps))) + picks])

    def source(self, prompt: list[int]) -> Resident | slots.PrefixBlock | None:
        """The longest cached prefix of ``prompt``: a parked sequence or a shared block (at
        least one prompt token is always left to compute)."""
        best, best_len = None, 0
        for resident in self.residents[self.n_active:]:
            n = len(resident.cached)
            if best_len < n < len(prompt) and prompt[:n] == resident.cached:
                best, best_len = resident, n
        for tokens, block in self.blocks.items():
            n = len(tokens)
            if best_len < n < len(prompt) and tuple(prompt[:n]) == tokens:
                best, best_len = block, n
        return best

    def share_prefix(self, requests: list[Request]) -> None:
        """Compute the common prefix of ``requests`` once, as a block, when it is long enough
        and not already cached."""
        if len(requests) < 2:
            return
        prompts = [r.prompt for r in requests]
        length = min(common_prefix_length(prompts), min(map(len, prompts)) - 1)
        if length < self.config.min_shared_prefix:
            return
        tokens = tuple(prompts[0][:length])
        if tokens in self.blocks or all(cached_length(self.source(p)) >= length for p in prompts):
            return
        base = max((b for t, b in self.blocks.items() if tokens[: len(t)] == t),
                   key=len, default=None)
        self.blocks[tokens] = self.compute_block(tokens, base)
        while len(self.blocks) > self.config.max_blocks:
            self.blocks.popitem(last=False)

    def compute_block(self, tokens: tuple[int, ...], base: slots.PrefixBlock | None
                      ) -> slots.PrefixBlock:
        """Keys/values of ``tokens``, extending ``base`` (a block they start with) if given."""
        start = len(base) if base else 0
        store = slots.SlotCache(self.cache.k.shape[0], self.cache.k.shape[2],
                                self.cache.k.shape[4], self.cache.k.dtype, self.device)
        store.reserve(1, len(tokens))
        if base:
            store.fill(0, base)
        write = torch.arange(start, len(tokens), device=self.device)[None]
        plan = slots.AttentionPlan(store.k, store.v, 0, write, [])
        self.forward(torch.tensor([tokens[start:]], device=self.device), write, plan)
        return slots.PrefixBlock(tokens, store.k[:, 0, :, : len(tokens)].contiguous(),
                                 store.v[:, 0, :, : len(tokens)].contiguous())

    def inline_block(self, resident: Resident) -> None:
        """Flat attention: copy the resident's block into its own slot, which it then reads
        alone (the block was still computed once for all its readers)."""
        if resident.block is not None:
            self.cache.reserve(len(self.residents), len(resident.block))
            self.cache.fill(self.residents.index(resident), resident.block)
            resident.block = None

    def activate(self, index: int) -> Resident:
        """Move the parked resident at ``index`` into the active range."""
        self.swap(index, self.n_active)
        self.n_active += 1
        return self.residents[self.n_active - 1]

    def claim_slot(self, resident: Resident) -> None:
        """Put a new resident in slot ``n_active``, evicting the least recently used parked
        sequence when every slot is taken."""
        capacity = self.config.max_batch_size + self.config.max_parked
        if len(self.residents) >= capacity:
            parked = range(self.n_active, len(self.residents))
            victim = min(parked, key=lambda i: self.residents[i].last_used)
            self.swap(victim, len(self.residents) - 1)
            self.residents.pop()
        self.residents.append(resident)
        self.cache.reserve(len(self.residents), 0)
        self.swap(len(self.residents) - 1, self.n_active)
        self.n_active += 1

    def swap(self, i: int, j: int) -> None:
        a, b = self.residents[i], self.residents[j]
        self.cache.swap(i, j, max(a.used, b.used))
        self.residents[i], self.residents[j] = b, a

    # ----------------------------------------------------------------- compute
    def prefill(self, first: int, count: int) -> torch.Tensor:
        """Feed the pending tokens of residents ``first..first+count-1``, in passes of at most
        ``prefill_tokens`` padded tokens; returns each one's last-token logits."""
        logits, start = [], first
        while start < first + count:
            end = start + 1
            longest = len(self.residents[start].pending)
            while end < first + count:
                longer = max(longest, len(self.residents[end].pending))
                if longer * (end - start + 1) > self.config.prefill_tokens:
                    break
                longest, end = longer, end + 1
            logits.append(self.feed(start, end))
            start = end
        return torch.cat(logits) if logits else torch.empty(0)

    def decode(self) -> None:
        """One token for every active sequence."""
        rows = self.residents[: self.n_active]
        if self.flat:
            logits = self.decoder.step([r.pending[0] for r in rows], [r.used for r in rows],
                                       [len(r.cached) for r in rows])
            for r in rows:
                r.cached.append(r.pending.pop())
        else:
            logits = self.feed(0, self.n_active)
        self.accept(rows, logits)

    def feed(self, start: int, end: int) -> torch.Tensor:
        """Run the pending tokens of residents ``start..end-1`` through the model (left-padded
        into one batch) and return the logits after each one's last token."""
        rows = self.residents[start:end]
        width = max(len(r.pending) for r in rows)
        ids, write, position = [], [], []
        for r in rows:
            pad = width - len(r.pending)
            # Padding goes first (so every row's last token is in the last column) and writes
            # its garbage keys *after* the row's real tokens, where decoding overwrites them.
            ids.append([0] * pad + r.pending)
            real = list(range(r.used, r.used + len(r.pending)))
            write.append(list(range(real[-1] + 1, real[-1] + 1 + pad)) + real)
            offset = len(r.cached) - r.used
            position.append([offset + w for w in write[-1]])
        write_t = torch.tensor(write, device=self.device)
        self.cache.reserve(len(self.residents), int(write_t.max()) + 1)
        plan = slots.AttentionPlan(self.cache.k, self.cache.v, start, write_t, block_groups(rows))
        logits = self.forward(torch.tensor(ids, device=self.device),
                              torch.tensor(position, device=self.device), plan)
        for r in rows:
            r.cached.extend(r.pending)
            r.pending = []
        return logits

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, plan: slots.AttentionPlan
                ) -> torch.Tensor:
        # The plan is the mask. A 4-D attention_mask is taken as already prepared, so
        # transformers builds none: its packed-sequence check reads a value back from the
        # device, which a CUDA graph cannot capture (and every step would pay for).
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=self.no_mask,
                         use_cache=False, logits_to_keep=1, kv_plan=plan)
        return out.logits[:, -1]

    # ----------------------------------------------------------------- sampling, finishing
    def accept(self, rows: list[Resident], logits: torch.Tensor) -> None:
        """Sample each row's next token from its logits, then finish rows that are done."""
        params = [r.request.params for r in rows]
        uniforms = None
        if any(p.seed is not None for p in params):  # a seeded row's draw: its own stream
            uniforms = [None if p.seed is None else request_uniform(p.seed, len(r.out_ids))
                        for p, r in zip(params, rows)]
        ids, logprobs = sample_tokens(logits, [p.temperature for p in params],
                                      [p.top_p for p in params], self.generator, uniforms)
        # one read from the device per step (ids are exact in float64)
        picked = torch.stack((ids.double(), logprobs.double())).tolist()
        self.clock += 1
        done = []
        for r, token, logprob in zip(rows, map(int, picked[0]), picked[1]):
            r.out_ids.append(token)
            r.out_logprobs.append(logprob)
            r.pending = [token]
            reason = self.finish_reason(r)
            if reason or r.request.future.cancelled():
                done.append((r, reason))
        for r, reason in sorted(done, key=lambda d: -self.residents.index(d[0])):
            self.park(r, reason)

    def finish_reason(self, r: Resident) -> str | None:
        request = r.request
        if r.out_ids[-1] in request.stop_ids:
            return "stop"
        if request.params.stop:
            longest = max(map(len, request.params.stop))
            tail = self.tokenizer.decode(r.out_ids[-longest:])
            if any(s in tail for s in request.params.stop):
                return "stop"
        if len(r.out_ids) >= request.params.max_tokens or len(r.cached) + 1 >= self.max_length:
            return "length"
        return None

    def park(self, r: Resident, reason: str | None) -> None:
        """Move ``r`` to the parked range, keeping its keys, then deliver its completion.

        Delivering last means a caller woken by the completion sees the engine already settled."""
        request = r.request
        r.request, r.last_used = None, self.clock
        self.kv_reserved -= request.footprint
        self.swap(self.residents.index(r), self.n_active - 1)
        self.n_active -= 1
        while len(self.residents) - self.n_active > self.config.max_parked:
            parked = range(self.n_active, len(self.residents))
            victim = min(parked, key=lambda i: self.residents[i].last_used)
            self.swap(victim, len(self.residents) - 1)
            self.residents.pop()
        if reason:
            resolve(request.future, Completion(
                token_ids=r.out_ids, logprobs=r.out_logprobs, finish_reason=reason,
                weight_version=self.weight_version))


def block_groups(rows: list[Resident]) -> list[tuple[slots.PrefixBlock, torch.Tensor | None]]:
    """For each block read by ``rows``: the block and the indices of its rows (None = all)."""
    members: dict[int, list[int]] = {}
    blocks: dict[int, slots.PrefixBlock] = {}
    for i, r in enumerate(rows):
        if r.block is not None:
            members.setdefault(id(r.block), []).append(i)
            blocks[id(r.block)] = r.block
    if len(blocks) == 1 and len(rows) == len(next(iter(members.values()))):
        return [(next(iter(blocks.values())), None)]
    return [(blocks[key], torch.tensor(idx, device=blocks[key].k.device))
            for key, idx in members.items()]


def resolve(future: concurrent.futures.Future, result=None, exception=None) -> None:
    """Complete ``future`` unless its caller has given up on it (cancelled)."""
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


def cached_length(source: Resident | slots.PrefixBlock | None) -> int:
    if isinstance(source, Resident):
        return len(source.cached)
    return len(source) if source is not None else 0


def common_prefix_length(prompts: list[list[int]]) -> int:
    low, high = min(prompts), max(prompts)  # the lexicographic extremes bound every pair
    n = 0
    while n < min(len(low), len(high)) and low[n] == high[n]:
        n += 1
    return n


def model_eos_ids(model, tokenizer) -> set[int]:
    """End-of-sequence ids from the generation config and the tokenizer."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
