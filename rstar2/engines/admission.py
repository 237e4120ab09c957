"""How much work ``serve-model`` takes on: the limits of one completions request and of all
requests in flight, checked before any work is done.

A request's *cost* is the KV tokens its sequences may come to hold: for each of its ``n``
copies of each prompt, the prompt plus ``max_tokens``, capped at the model's context (what the
engine reserves when it admits a sequence). Refusals, in the order they are checked:

* 400 when ``n`` or ``max_tokens`` is over its limit, when a text prompt is longer (in UTF-8
  bytes) than any text that fits the context (checked before tokenising it), or when the cost
  is over the per-request limit (checked once before tokenising, on a lower bound, and again
  after);
* 429 with ``Retry-After`` when the request fits on its own but not beside the requests in
  flight (an idle server takes any request that passes the 400 checks).

Every limit left unset is sized to the engine (``ServeLimits``), so a bigger model or a bigger
KV budget gets proportionally bigger defaults.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from pydantic import Field

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
            max_prompt_bytes=limits.max_prompt_bytes or context * longest_token_bytes(engine.tokenizer),
            context=context,
        )


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
        self.check_cost(n * sequences * min(1 + max_tokens, limits.context), "at least ")

    def cost(self, prompts: list[list[int]], n: int, max_tokens: int) -> int:
        """The KV tokens the request may hold (module docstring); 400 past the request limit
        or for a prompt that leaves no room in the context."""
        for prompt in prompts:
            if len(prompt) >= self.limits.context:
                raise ServiceError(f"prompt of {len(prompt)} tokens exceeds the model's "
                                   f"{self.limits.context}-token context")
        cost = n * sum(min(len(p) + max_tokens, self.limits.context) for p in prompts)
        self.check_cost(cost)
        return cost

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
