"""Sequences for the trainer's forward passes: packing into micro-batches, response log-probs.

    batches = micro_batches(sequences, max_tokens)          # lists of TrainSequence
    tensors = collate(batch, pad_id, module_device(model))   # left-padded, on the model's device
    logits = response_logits(model, tensors)                 # [batch, R, vocab]

A ``TrainSequence`` is one rollout as the loss sees it: prompt ids, response ids, the response's
loss mask and sampling log-probs, and the rollout's advantage. Micro-batches are formed by
sorting by length and cutting whenever ``count × longest`` would pass ``max_tokens`` (padded
tokens are what a forward pass costs), so similar lengths share a batch; a sequence longer than
``max_tokens`` gets a batch of its own.

Sequences are *left*-padded, so every response ends in the last column and the logits of all
responses are the last R + 1 positions (R = the longest response): the model computes the LM
head only there (``logits_to_keep``), which on a 49K vocabulary is most of the memory a forward
pass needs. Position ids count real tokens only, so padding changes nothing. ``collate`` builds the tensors
directly on the device it is given, the model's (``engines.device.module_device``), so the same
code trains on a CPU or a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TrainSequence:
    """One rollout (or SFT trace) as the trainer consumes it."""

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    """1 where the token is trained on (sampled by the model), 0 for tool responses."""
    old_logprobs: list[float]
    """Log-probs of the response tokens under the policy that sampled them (0 where masked)."""
    advantage: float = 0.0

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True)
class Collated:
    """A left-padded micro-batch; response tensors are right-aligned to width R."""

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    position_ids: torch.Tensor  # [B, T]
    response_ids: torch.Tensor  # [B, R]
    loss_mask: torch.Tensor  # [B, R]
    old_logprobs: torch.Tensor  # [B, R]
    advantages: torch.Tensor  # [B]


def micro_batches(sequences: Sequence[TrainSequence], max_tokens: int) -> list[list[TrainSequence]]:
    """Group ``sequences`` so that each batch's padded size stays within ``max_tokens``."""
    batches: list[list[TrainSequence]] = []
    current: list[TrainSequence] = []
    for sequence in sorted(sequences, key=len):
        if current and (len(current) + 1) * len(sequence) > max_tokens:
            batches.append(current)
            current = []
        current.append(sequence)
    if current:
        batches.append(current)
    return batches


def collate(batch: Sequence[TrainSequence], pad_id: int, device: torch.device | str = "cpu") -> Collated:
    """Left-pad whole sequences to the longest one, right-align responses to the longest one;
    every tensor on ``device``."""
    width = max(map(len, batch))
    response_width = max(len(s.response_ids) for s in batch)

    def left_pad(values: list, size: int, fill) -> list:
        return [fill] * (size - len(values)) + values

    ids = [left_pad(s.prompt_ids + s.response_ids, width, pad_id) for s in batch]
    attention = [left_pad([1] * len(s), width, 0) for s in batch]
    positions = [left_pad(list(range(len(s))), width, 0) for s in batch]
    def tensor(values, dtype=None) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=device)

    return Collated(
        input_ids=tensor(ids),
        attention_mask=tensor(attention),
        position_ids=tensor(positions),
        response_ids=tensor([left_pad(s.response_ids, response_width, pad_id) for s in batch]),
        loss_mask=tensor([left_pad(s.loss_mask, response_width, 0) for s in batch]),
        old_logprobs=tensor([left_pad(s.old_logprobs, response_width, 0.0) for s in batch]),
        advantages=tensor([s.advantage for s in batch], torch.float32),
    )


def response_logits(model: torch.nn.Module, batch: Collated) -> torch.Tensor:
    """Logits that predict each response token, ``[B, R, vocab]``."""
    response_width = batch.response_ids.shape[1]
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=response_width + 1,
        use_cache=False,
    )
    return out.logits[:, :-1]
