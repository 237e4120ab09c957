"""The records the engine's parts share: a queued request and a sequence that owns a slot."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field

from rstar2.engines import slots
from rstar2.engines.base import Completion, SamplingParams


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
    out_versions: list[int | None] = field(default_factory=list)  # the weights each was sampled under
    last_used: int = 0

    @property
    def used(self) -> int:
        """Slot positions holding keys (the part of ``cached`` after the block)."""
        return len(self.cached) - (len(self.block) if self.block else 0)

    def start(self, request: Request) -> None:
        self.request = request
        self.pending = request.prompt[len(self.cached):]
        self.out_ids, self.out_logprobs, self.out_versions = [], [], []

    def completion(self, finish_reason: str) -> Completion:
        """What it generated, stamped with the weights that sampled it: one version, or where
        new weights arrived meanwhile, the oldest and every token's own."""
        versions = set(self.out_versions)
        known = [v for v in versions if v is not None]
        return Completion(token_ids=self.out_ids, logprobs=self.out_logprobs,
                          finish_reason=finish_reason, weight_version=min(known, default=None),
                          token_versions=([-1 if v is None else v for v in self.out_versions]
                                          if len(versions) > 1 else None))


def resolve(future: concurrent.futures.Future, result=None, exception=None) -> None:
    """Complete ``future`` unless its caller has given up on it (cancelled)."""
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass
