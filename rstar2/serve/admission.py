"""How much work ``serve-model`` takes on: the limits of one completions request and of all
requests in flight, checked before any work is done; and how the requests it took share the
engine (``FairShare``).

A request's *cost* is the KV tokens its sequences may come to hold: for each of its ``n``
copies of each prompt, the prompt plus ``max_tokens``, capped at the model's context (what the
engine reserves when it admits a sequence). Refusals, in the order they are checked:

* 400 when ``n`` or ``max_tokens`` is over its limit, when a text prompt is longer (in UTF-8
  bytes) than any text that fits the context (checked before tokenising it), or when the cost,
  or one sequence's prompt plus ``max_tokens`` (what it holds in the engine), is over its
  per-request limit (checked once before tokenising, on a lower bound, and again after);
* 429 with ``Retry-After`` when the request fits on its own but not beside the requests in
  flight (an idle server takes any request that passes the 400 checks).

Every limit left unset is sized to the engine (``ServeLimits``), so a bigger model or a bigger
KV budget gets proportionally bigger defaults.

Sharing the engine. The engine admits its queue first come, first served and never preempts,
so a request handed to it whole (``n=32`` of 8,000 tokens) would take every decode row and the
KV budget until its last sequence ends, and a 4-token request sent beside it would wait that
long. ``FairShare`` therefore hands each request's sequences to the engine in turns: a request
has at most ``max_request_share`` sequences, holding at most ``max_request_kv_tokens``, in the
engine at once, the engine is never handed more sequences than it has decode rows, and each
free row goes to the request with the fewest sequences in the engine (the oldest on a tie).
A request arriving beside a big one thus takes a row the big one may not hold, or the next row
that frees, not the end of the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import Field

from rstar2.engines.base import Completion, SamplingParams
from rstar2.section import Section
from rstar2.service import ServiceError

RETRY_AFTER_S = 1


class ServeLimits(Section):
    """What one request, and all requests together, may ask of ``serve-model``."""

    max_n: int | None = Field(None, ge=1)
    """Largest ``n`` (completions per prompt). None: 8 x the engine's batch size."""
    max_completion_tokens: int | None = Field(None, ge=1)
    """Largest ``max_tokens``. None: the model's context length."""
    max_request_tokens: int | None = Field(None, ge=1)
    """Most tokens one request may ask for: the sum over its sequences (n per prompt) of prompt
    plus max_tokens, each capped at the context. None: the engine's KV capacity."""
    max_inflight_tokens: int | None = Field(None, ge=1)
    """Most tokens all requests being served may ask for together; past it a request is
    answered 429 (retry later). None: 16 x the engine's KV capacity."""
    max_request_share: int | None = Field(None, ge=1)
    """Most sequences of one request in the engine at once (queued there or decoding); the
    rest wait their turn in the server (module docstring), so a request never takes every
    decode row from the requests beside it. More than the batch size acts as the batch size
    (one client alone at full speed, at the price of that fairness). None: half the engine's
    batch size, at least 1."""
    max_request_kv_tokens: int | None = Field(None, ge=1)
    """Most KV tokens the sequences of one request in the engine may hold at once (prompt plus
    max_tokens each, capped at the context); a request with one sequence over it is refused
    (400). None: half the engine's KV capacity, at least the context."""
    max_prompt_bytes: int | None = Field(None, ge=1)
    """Longest text prompt in UTF-8 bytes, checked before it is tokenised. None: the context
    times the longest token's bytes (no longer text can fit the context)."""
    max_request_mb: float = Field(32.0, gt=0)
    """Largest HTTP request body in MiB; a larger one is answered 413 unread."""


@dataclass(frozen=True)
class Limits:
    """``ServeLimits`` with every default sized to one engine."""

    max_n: int
    max_completion_tokens: int
    max_request_tokens: int
    max_inflight_tokens: int
    max_request_share: int
    max_request_kv_tokens: int
    max_prompt_bytes: int
    context: int

    @classmethod
    def sized(cls, limits: ServeLimits, engine) -> Limits:
        """``engine``: an ``HFEngine`` (its context, KV capacity, batch size and tokenizer)."""
        context, capacity = engine.max_length, engine.kv.capacity
        return cls(
            max_n=limits.max_n or 8 * engine.config.max_batch_size,
            max_completion_tokens=limits.max_completion_tokens or context,
            max_request_tokens=limits.max_request_tokens or capacity,
            max_inflight_tokens=limits.max_inflight_tokens or 16 * capacity,
            max_request_share=limits.max_request_share or max(1, engine.config.max_batch_size // 2),
            max_request_kv_tokens=limits.max_request_kv_tokens or max(capacity // 2, context),
            max_prompt_bytes=limits.max_prompt_bytes or context * longest_token_bytes(engine.tokenizer),
            context=context,
        )

    def footprint(self, prompt_tokens: int, max_tokens: int) -> int:
        """The KV tokens one sequence may come to hold: its prompt plus ``max_tokens``, capped at
        the context (what the engine reserves when it admits it)."""
        return min(prompt_tokens + max_tokens, self.context)


def longest_token_bytes(tokenizer) -> int:
    """An upper bound of the UTF-8 bytes one token stands for: its vocabulary string's length
    in UTF-8 (byte-level BPE spells each byte as one character of at least one byte)."""
    return max(len(token.encode("utf-8", "surrogatepass")) for token in tokenizer.get_vocab())


def text_bytes(text: str) -> int:
    """UTF-8 length of a text prompt; refuses text that has no UTF-8 form (lone surrogates)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ServiceError(f"prompt is not valid Unicode text ({exc.reason} at character "
                           f"{exc.start})") from exc


class Admission:
    """Checks requests against ``Limits`` and counts the tokens in flight."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.in_flight = 0

    def check_request(self, n: int, max_tokens: int, texts: list[str], sequences: int) -> None:
        """The 400s that need no tokenising: ``n``, ``max_tokens``, text lengths, and the cost
        of ``sequences`` prompts of at least one token each."""
        limits = self.limits
        if n > limits.max_n:
            raise ServiceError(f"n={n} is over this server's limit of {limits.max_n}")
        if max_tokens > limits.max_completion_tokens:
            raise ServiceError(f"max_tokens={max_tokens} is over this server's limit of "
                               f"{limits.max_completion_tokens}")
        for text in texts:
            if (size := text_bytes(text)) > limits.max_prompt_bytes:
                raise ServiceError(f"a text prompt of {size} bytes is over this server's limit of "
                                   f"{limits.max_prompt_bytes} bytes (it cannot fit the "
                                   f"{limits.context}-token context)")
        shortest = limits.footprint(1, max_tokens)
        self.check_sequence(shortest, "at least ")
        self.check_cost(n * sequences * shortest, "at least ")

    def cost(self, prompts: list[list[int]], n: int, max_tokens: int) -> int:
        """The KV tokens the request may hold (module docstring); 400 past the request limit
        or for a prompt that leaves no room in the context."""
        for prompt in prompts:
            if len(prompt) >= self.limits.context:
                raise ServiceError(f"prompt of {len(prompt)} tokens exceeds the model's "
                                   f"{self.limits.context}-token context")
        footprints = [self.limits.footprint(len(p), max_tokens) for p in prompts]
        self.check_sequence(max(footprints))
        cost = n * sum(footprints)
        self.check_cost(cost)
        return cost

    def check_sequence(self, footprint: int, bound: str = "") -> None:
        """400 for a sequence that alone holds more than a request may hold in the engine
        (``FairShare`` could never hand it over)."""
        if footprint > self.limits.max_request_kv_tokens:
            raise ServiceError(f"a sequence of the request may hold {bound}{footprint} tokens "
                               f"(prompt + max_tokens), over this server's limit of "
                               f"{self.limits.max_request_kv_tokens} tokens one request may "
                               f"hold at once")

    def check_cost(self, cost: int, bound: str = "") -> None:
        if cost > self.limits.max_request_tokens:
            raise ServiceError(f"the request asks for {bound}{cost} tokens (n x prompts x (prompt + "
                               f"max_tokens)), over this server's limit of "
                               f"{self.limits.max_request_tokens} per request")

    @contextlib.contextmanager
    def reserved(self, cost: int):
        """Count ``cost`` in flight while the request is served; 429 when it does not fit."""
        if self.in_flight and self.in_flight + cost > self.limits.max_inflight_tokens:
            raise ServiceError(f"the server is at its limit of {self.limits.max_inflight_tokens} "
                               f"tokens in flight; retry later", 429,
                               {"Retry-After": str(RETRY_AFTER_S)})
        self.in_flight += cost
        try:
            yield
        finally:
            self.in_flight -= cost


@dataclass(eq=False)
class Turns:
    """One request's sequences as ``FairShare`` hands them to the engine: ``next`` is the first
    not yet handed over; ``rows`` and ``kv`` count those in the engine and their footprints."""

    prompts: Sequence[Sequence[int]]
    params: SamplingParams
    footprints: list[int]
    done: asyncio.Future  # all completions in order, or the first failure
    outputs: list[Completion | None]
    next: int = 0
    rows: int = 0
    kv: int = 0
    finished: int = 0
    in_engine: set[asyncio.Future] = field(default_factory=set)

    def may_take_row(self, limits: Limits) -> bool:
        """Whether its next sequence fits its share of the engine beside those in it."""
        return (self.rows < limits.max_request_share
                and self.kv + self.footprints[self.next] <= limits.max_request_kv_tokens)


class FairShare:
    """Hands the sequences of the requests being served to the engine in turns (module
    docstring); all of it runs on the event loop, so it needs no lock."""

    def __init__(self, engine, limits: Limits):
        """``engine``: an ``HFEngine`` (its batch size, prompt check and ``submit``)."""
        self.engine, self.limits = engine, limits
        self.max_batch_size = engine.config.max_batch_size
        self.in_engine = 0  # sequences handed over whose completion is not yet taken back
        self.waiting: list[Turns] = []  # requests with sequences not handed over, oldest first

    @property
    def held(self) -> int:
        """Sequences waiting in the server for their turn (``/metrics`` counts them waiting)."""
        return sum(len(t.prompts) - t.next for t in self.waiting)

    @property
    def busy(self) -> bool:
        """Whether any request has a sequence in the engine or waiting for its turn."""
        return bool(self.in_engine or self.waiting)

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams
                       ) -> list[Completion]:
        """The completions of ``prompts`` in order, as ``HFEngine.generate``. A prompt the
        engine refuses raises its ``ValueError`` before any is handed over; cancelling the
        call (its client left) cancels its sequences in the engine and drops the rest."""
        for prompt in prompts:
            self.engine.checked(prompt)
        footprints = [self.limits.footprint(len(p), params.max_tokens) for p in prompts]
        turns = Turns(prompts, params, footprints, asyncio.get_running_loop().create_future(),
                      [None] * len(prompts))
        self.waiting.append(turns)
        self.hand_over()
        try:
            return await turns.done
        finally:
            if turns in self.waiting:
                self.waiting.remove(turns)
            for future in list(turns.in_engine):
                future.cancel()

    def hand_over(self) -> None:
        """Fill the engine's free rows, each with a sequence of the request that has the
        fewest in the engine among those whose share allows one more. A request's sequences
        picked together are submitted together, so the engine admits them in one step and
        prefills identical prompts once."""
        picked: dict[Turns, list[int]] = {}
        while self.in_engine < self.max_batch_size:
            turns = min((t for t in self.waiting if t.may_take_row(self.limits)),
                        key=lambda t: t.rows, default=None)
            if turns is None:
                break
            picked.setdefault(turns, []).append(turns.next)
            turns.rows += 1
            turns.kv += turns.footprints[turns.next]
            turns.next += 1
            if turns.next == len(turns.prompts):
                self.waiting.remove(turns)
            self.in_engine += 1
        for turns, indices in picked.items():
            submitted = self.engine.submit([turns.prompts[i] for i in indices], turns.params)
            for index, future in zip(indices, map(asyncio.wrap_future, submitted)):
                turns.in_engine.add(future)
                future.add_done_callback(functools.partial(self.taken_back, turns, index))

    def taken_back(self, turns: Turns, index: int, future: asyncio.Future) -> None:
        """A sequence left the engine (finished, failed or cancelled): record its completion
        and give its row to the next turn."""
        turns.in_engine.discard(future)
        turns.rows -= 1
        turns.kv -= turns.footprints[index]
        self.in_engine -= 1
        failure = None if future.cancelled() else future.exception()  # read: never "unretrieved"
        if not turns.done.done():  # else its call has ended (failed, or cancelled: ``generate``)
            if failure is not None:
                turns.done.set_exception(failure)
            else:
                turns.outputs[index] = future.result()
                turns.finished += 1
                if turns.finished == len(turns.prompts):
                    turns.done.set_result(turns.outputs)
        self.hand_over()
