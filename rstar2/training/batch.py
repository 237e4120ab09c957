"""Sequences for the trainer's forward passes, and the bin-packing that groups them into passes.

    batches = micro_batches(sequences, max_tokens)          # RL: lists of TrainSequence
    bins = first_fit(sizes, capacity, longest_first=True)   # SFT's rows: indices into sizes

A ``TrainSequence`` is one rollout (or SFT trace) as the loss sees it: prompt ids, response ids,
the response's loss mask and sampling log-probs, and the rollout's advantage.

``first_fit`` is the one packer: items taken by size, each into the first bin with room for it
(an item larger than a bin gets one of its own). The SFT step fills its rows longest first
(``rstar2.training.packing.pack_rows``, a row's shared prefix counted once). The RL update takes
its micro-batches shortest first (``micro_batches``), where the first bin with room is always
the newest: the sequences sorted by length are cut whenever the next would take the
micro-batch past ``max_tokens`` tokens. The update packs each micro-batch into one row without
padding (``rstar2.training.packing.pack_row``), so these are the tokens a pass computes, or
fewer: the prompt opening the sequences share is computed once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TrainSequence:
    """One rollout (or SFT trace) as the trainer consumes it."""

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    """1 where the token is trained on (sampled by the model), 0 for tool responses."""
    old_logprobs: list[float]
    """Log-probs of the response tokens under the policy that sampled them (0 where masked):
    the engine's, or the trainer's recomputation of them at the sampling weights."""
    advantage: float = 0.0
    behaviour_logprobs: list[float] | None = None
    """The engine's sampled log-probs where ``old_logprobs`` are the trainer's recomputation
    (an engine with its own copy of the weights); None where the two are the same."""

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)


def first_fit(sizes: Sequence[int], capacity: int, longest_first: bool = False) -> list[list[int]]:
    """The indices of ``sizes`` in bins of at most ``capacity`` each: taken shortest (or longest)
    first, equal sizes in their given order, each into the first bin with room for it; one
    larger than ``capacity`` gets a bin of its own."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=longest_first)
    bins: list[list[int]] = []
    room: list[int] = []
    open_bins: list[int] = []  # bins that may take another item, in order
    for index in order:
        size = sizes[index]
        # a bin with less room than every size still to come is closed: shortest first, that is
        # every bin but the newest, so the search stays short however many bins there are
        smallest_to_come = sizes[order[-1]] if longest_first else size
        open_bins = [b for b in open_bins if room[b] >= smallest_to_come]
        slot = next((b for b in open_bins if room[b] >= size), None)
        if slot is None:
            slot = len(bins)
            bins.append([])
            room.append(capacity)
            open_bins.append(slot)
        bins[slot].append(index)
        room[slot] -= size
    return bins


def micro_batches(sequences: Sequence[TrainSequence], max_tokens: int) -> list[list[TrainSequence]]:
    """Group ``sequences``, shortest first, into micro-batches of at most ``max_tokens`` tokens."""
    sizes = [len(s) for s in sequences]
    return [[sequences[i] for i in group] for group in first_fit(sizes, max_tokens)]
