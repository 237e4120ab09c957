"""Sequences for the trainer's forward passes, and their micro-batches.

    batches = micro_batches(sequences, max_tokens)          # lists of TrainSequence

A ``TrainSequence`` is one rollout as the loss sees it: prompt ids, response ids, the response's
loss mask and sampling log-probs, and the rollout's advantage. A micro-batch is what one forward
pass holds: sequences sorted by length are cut whenever the next would take the micro-batch past
``max_tokens`` tokens (a sequence longer than that gets a micro-batch of its own). The update
packs each micro-batch into one row without padding (``rstar2.rl.packing.pack_row``), so these
are the tokens a pass computes, or fewer: the prompt opening the sequences share is computed
once.
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


def micro_batches(sequences: Sequence[TrainSequence], max_tokens: int) -> list[list[TrainSequence]]:
    """Group ``sequences``, shortest first, into micro-batches of at most ``max_tokens`` tokens."""
    batches: list[list[TrainSequence]] = []
    current: list[TrainSequence] = []
    size = 0
    for sequence in sorted(sequences, key=len):
        if current and size + len(sequence) > max_tokens:
            batches.append(current)
            current, size = [], 0
        current.append(sequence)
        size += len(sequence)
    if current:
        batches.append(current)
    return batches
