"""Admission and prefix blocks: which sequence sits in which slot, and what is cached.

Slots ``0..n_active-1`` hold the active sequences (so a decode step reads one contiguous
range), the slots after them the parked ones (finished, kept for the next turn of their
rollout, least recently used evicted first). Shared prefix blocks are kept least recently
used first too. A request is placed on the longest cached prefix of its prompt -- a parked
sequence it extends (which resumes in its slot) or a block -- and identical new prompts are
prefilled once and copied (``place`` and ``copy_twins``).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass

from rstar2.engines import slots
from rstar2.engines.hf.config import HFEngineConfig
from rstar2.engines.hf.requests import Request, Resident

ComputeBlock = Callable[[tuple[int, ...], "slots.PrefixBlock | None"], slots.PrefixBlock]


@dataclass
class Placed:
    """Where ``SlotTable.place`` put a batch of requests."""

    reps: list[Resident]
    """The sequences whose pending tokens are prefilled, in slots ``first..first+len-1``."""
    copies: list[tuple[Resident, Resident]]
    """(copy, original): a new prompt identical to another's, which gets its keys after."""
    first: int

    @property
    def rows(self) -> list[Resident]:
        return self.reps + [copy for copy, _ in self.copies]

    @property
    def picks(self) -> list[int]:
        """The prefill's logits row of each of ``rows``."""
        return list(range(len(self.reps))) + [self.reps.index(original) for _, original in self.copies]


class SlotTable:
    """The residents of the slots, the slot cache and the shared blocks."""

    def __init__(self, config: HFEngineConfig, cache: slots.SlotCache):
        self.config = config
        self.cache = cache
        self.residents: list[Resident] = []  # index = slot; the first n_active are active
        self.n_active = 0
        self.blocks: collections.OrderedDict[tuple[int, ...], slots.PrefixBlock] = (
            collections.OrderedDict())
        self.clock = 0  # decode steps taken, for least-recently-used eviction

    @property
    def active(self) -> list[Resident]:
        return self.residents[: self.n_active]

    def drop(self) -> None:
        """Forget every sequence and block (new weights, or a failed step)."""
        self.residents, self.n_active = [], 0
        self.blocks.clear()
        self.cache.clear()

    def drop_parked(self) -> None:
        """Forget the parked sequences and the shared blocks (new weights): the active
        sequences keep their slots, and the blocks they read, until they finish."""
        self.residents = self.residents[: self.n_active]
        self.blocks.clear()

    def place(self, requests: list[Request], compute_block: ComputeBlock) -> Placed:
        """Give each request a slot, resuming a parked sequence it extends or reading the
        longest cached block (computing a block their prompts share first)."""
        self.share_prefix([r for r in requests if not isinstance(self.source(r.prompt), Resident)],
                          compute_block)
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
        return Placed(reps, copies, first)

    def copy_twins(self, copies: list[tuple[Resident, Resident]]) -> None:
        """After the prefill: each copy gets its original's keys."""
        for resident, original in copies:
            src, dst = self.residents.index(original), self.residents.index(resident)
            self.cache.reserve(len(self.residents), original.used)
            self.cache.copy(src, dst, original.used)
            resident.block = original.block
            resident.cached.extend(resident.pending)
            resident.pending = []

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

    def share_prefix(self, requests: list[Request], compute_block: ComputeBlock) -> None:
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
        self.blocks[tokens] = compute_block(tokens, base)
        while len(self.blocks) > self.config.max_blocks:
            self.blocks.popitem(last=False)

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
        if len(self.residents) >= self.config.slots:
            self.evict_oldest_parked()
        self.residents.append(resident)
        self.cache.reserve(len(self.residents), 0)
        self.swap(len(self.residents) - 1, self.n_active)
        self.n_active += 1

    def park(self, resident: Resident) -> None:
        """Move a finished ``resident`` to the parked range, keeping its keys, and keep at
        most ``max_parked`` parked."""
        resident.request, resident.last_used = None, self.clock
        self.swap(self.residents.index(resident), self.n_active - 1)
        self.n_active -= 1
        while len(self.residents) - self.n_active > self.config.max_parked:
            self.evict_oldest_parked()

    def evict_oldest_parked(self) -> None:
        parked = range(self.n_active, len(self.residents))
        victim = min(parked, key=lambda i: self.residents[i].last_used)
        self.swap(victim, len(self.residents) - 1)
        self.residents.pop()

    def swap(self, i: int, j: int) -> None:
        a, b = self.residents[i], self.residents[j]
        self.cache.swap(i, j, max(a.used, b.used))
        self.residents[i], self.residents[j] = b, a


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
