"""Packed training sequences: whole sequences end to end, no padding, each attending to itself only.

    rows = pack_rows(sequences, row_tokens=2048)            # SFT: rows of a step's traces
    with packed_attention(model):
        loss = sum(packed_nll(model, row) for row in rows)   # = the sequences' summed NLL
        logits, targets = trained_logits(model, pack_row(micro_batch))   # RL: the loss's tokens

Both the SFT and the RL update train on packed rows (``rstar2.sft.train``, ``rstar2.rl.update``).

A row lays sequences end to end (``rstar2.training.batch.first_fit``, longest first), so a
forward pass spends nothing on padding. Attention is split at the sequence borders
(``segment_attention``): each sequence attends causally over its own tokens, so a row of L
tokens holding sequences of about l tokens costs attention of order L·l rather than L² (a dense
block-diagonal mask over the row would cost L², on a CPU, where no varlen kernel exists, about a
third of an SFT step at L = 1024: docs/benchmarks.md). On a CPU each sequence gets its own SDPA
call; on a GPU, where a call per sequence costs more in launches and new kernel shapes than the
attention itself, a layer attends for all of a row's sequences in one call over them padded into
a batch (``SegmentLayout``).

The sequences of a row usually open with the same tokens: the system prompt and the chat
template up to the question (a third of a short GSM8K trace). The row holds that shared prefix
once, at its start; each sequence then holds only the rest, with position ids continuing after
the prefix, and attends to the prefix's keys and values and causally to its own. The prefix's
hidden states are the same in every sequence (same tokens, same positions), so computing them
once and letting each sequence's gradient flow back into them is exact, and saves their
forward and backward passes for all but one sequence of the row.

``trained_logits`` applies the LM head only at the positions that predict a trained token, so
prompt and tool-response positions cost no head and no softmax over the vocabulary; it returns
them in row order (``PackedRow.sources`` says which sequence each part of the row is). The sum
over rows equals the sum of the sequences' losses taken one by one (tests/sft/test_train.py and
tests/rl/test_update.py check losses, log-probs and gradients on the real model).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend

from rstar2.models.device import module_device
from rstar2.training.batch import TrainSequence, first_fit
from rstar2.training.vocab import token_logprobs

IGNORE = -100
"""Target of a position that predicts nothing trained (``F.cross_entropy``'s ignore index)."""
ATTENTION = "rstar2_packed"
MIN_SHARED_PREFIX = 16
"""A common opening shorter than this is not shared (not worth a separate attention part)."""
BATCHED_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
"""SDPA kernels the padded batch may use: not cuDNN's, which builds a graph for every new shape
(a packed row's batch has a new shape nearly every step) and measured twice as slow here."""
KEY_ALIGNMENT = 16
"""The batched attention's key length is a multiple of this (the fused GPU kernels want masks
whose rows are aligned; fewer distinct shapes too)."""


@dataclass(frozen=True)
class PackedRow:
    """A shared prefix, then the rest of each sequence, end to end."""

    input_ids: list[int]
    targets: list[int]
    """Per position, the trained token it predicts, or ``IGNORE``."""
    prefix: int
    """Tokens every sequence of the row opens with, held once at the start (0: none)."""
    lengths: list[int]
    """Each sequence's length after the prefix, in order."""
    sources: list[int]
    """Each sequence's index in the list that was packed, in the row's order."""

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def position_ids(self) -> list[int]:
        return [*range(self.prefix), *(p for length in self.lengths for p in range(self.prefix, self.prefix + length))]

    @property
    def segments(self) -> list[tuple[int, int]]:
        """Each sequence's [start, end) in the row, after the prefix."""
        ends = [self.prefix + sum(self.lengths[:i + 1]) for i in range(len(self.lengths))]
        return list(zip([self.prefix, *ends[:-1]], ends))


def sequence_targets(sequence: TrainSequence) -> list[int]:
    """What each position of ``sequence`` predicts: response token i, where the loss mask is 1,
    is the target of the position before it."""
    prompt = len(sequence.prompt_ids)
    targets = [IGNORE] * len(sequence)
    for i, (token, trained) in enumerate(zip(sequence.response_ids, sequence.loss_mask)):
        if trained:
            targets[prompt + i - 1] = token
    return targets


def shared_prefix(sequences: Sequence[TrainSequence]) -> int:
    """How many opening prompt tokens all ``sequences`` share, ending at least one token before
    the shortest prompt ends (so the prefix's last position predicts an untrained prompt token
    in every sequence); 0 when that is under ``MIN_SHARED_PREFIX``."""
    first = sequences[0].prompt_ids
    limit = min(len(s.prompt_ids) for s in sequences) - 1
    length = 0
    while length < limit and all(s.prompt_ids[length] == first[length] for s in sequences):
        length += 1
    return length if length >= MIN_SHARED_PREFIX else 0


def pack_rows(sequences: Sequence[TrainSequence], row_tokens: int, share_prefix: bool = True) -> list[PackedRow]:
    """``sequences`` in rows of at most ``row_tokens`` tokens (their shared prefix counted once
    per row), longest first, each into the first row it fits (a longer sequence gets a row of
    its own)."""
    if not sequences:
        return []
    prefix = shared_prefix(sequences) if share_prefix else 0
    rows = first_fit([len(s) - prefix for s in sequences], row_tokens - prefix, longest_first=True)
    opening = list(sequences[0].prompt_ids[:prefix])
    return [PackedRow(input_ids=opening + [t for i in row for t in (sequences[i].prompt_ids + sequences[i].response_ids)[prefix:]],
                      targets=[IGNORE] * prefix + [t for i in row for t in sequence_targets(sequences[i])[prefix:]],
                      prefix=prefix, lengths=[len(sequences[i]) - prefix for i in row], sources=row) for row in rows]


def pack_row(sequences: Sequence[TrainSequence]) -> PackedRow:
    """All of ``sequences`` in one row (a micro-batch of the RL update, already sized)."""
    return pack_rows(sequences, row_tokens=sum(map(len, sequences)))[0]


@dataclass(frozen=True)
class SegmentLayout:
    """How one layer attends over a packed row's sequences: a call per sequence (``batch`` None),
    or all of them in one call as a padded batch. One call per sequence wastes nothing on
    padding, which makes it the faster form on a CPU; on a GPU each call costs a kernel launch
    and a new shape, more than the attention itself, so there the row attends as one batch
    (docs/benchmarks.md has both measurements)."""

    prefix: int
    segments: list[tuple[int, int]]
    batch: "PaddedSegments | None" = None

    @classmethod
    def of(cls, row: PackedRow, device: torch.device, batched: bool | None = None) -> "SegmentLayout":
        """``row``'s layout on ``device``; ``batched`` None: one batch everywhere but on a CPU."""
        batched = device.type != "cpu" if batched is None else batched
        return cls(row.prefix, row.segments, PaddedSegments.of(row, device) if batched else None)


@dataclass(frozen=True)
class PaddedSegments:
    """A packed row's sequences as one padded batch (``SegmentLayout``)."""

    index: torch.Tensor
    """[sequences, width]: the row position of each sequence's i-th token (padding repeats its first)."""
    mask: torch.Tensor
    """[sequences, 1, width, prefix + width]: what a query sees: the prefix, and its own sequence causally."""
    real: torch.Tensor
    """Positions of the flattened [sequences * width] that hold a sequence's token, in row order."""

    @classmethod
    def of(cls, row: PackedRow, device: torch.device) -> "PaddedSegments":
        prefix, lengths = row.prefix, torch.tensor(row.lengths)
        width = -(-(prefix + max(row.lengths)) // KEY_ALIGNMENT) * KEY_ALIGNMENT - prefix
        starts = torch.tensor([start for start, _ in row.segments])
        columns = torch.arange(width)
        inside = columns[None, :] < lengths[:, None]
        index = torch.where(inside, starts[:, None] + columns[None, :], starts[:, None])
        # a padding query sees its sequence's tokens too (never nothing: that would be NaN); its output is dropped
        own = (columns[None, :, None] >= columns[None, None, :]) & inside[:, None, :]
        mask = torch.cat([torch.ones(len(row.lengths), width, prefix, dtype=torch.bool), own], dim=2)[:, None]
        return cls(index.to(device), mask.to(device), inside.flatten().nonzero()[:, 0].to(device))


def segment_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                      packed_layout: SegmentLayout | None = None, **kwargs):
    """transformers' SDPA attention over a packed row (``SegmentLayout``): the shared prefix
    attends causally to itself, each sequence to the prefix and causally to itself; attention
    never crosses from one sequence to another. Returns [1, row, heads, dim] as SDPA does."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if packed_layout is None:
        raise ValueError("segment attention needs a packed_layout (call packed_nll)")
    p, batch = packed_layout.prefix, packed_layout.batch

    def attend(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None):
        return sdpa_attention_forward(module, queries, keys, values, mask, dropout=dropout, scaling=scaling,
                                      **kwargs)[0]

    outputs = [attend(query[:, :, :p], key[:, :, :p], value[:, :, :p], None)] if p else []
    if batch is not None:
        count = batch.index.shape[0]

        def batched(states: torch.Tensor, with_prefix: bool) -> torch.Tensor:
            """[1, heads, row, dim] -> [sequences, heads, (prefix +) width, dim]."""
            own = states[0][:, batch.index].transpose(0, 1)
            return torch.cat([states[:, :, :p].expand(count, -1, -1, -1), own], dim=2) if with_prefix and p else own

        with torch.nn.attention.sdpa_kernel(BATCHED_BACKENDS):
            out = attend(batched(query, False), batched(key, True), batched(value, True), batch.mask)
        outputs.append(out.flatten(0, 1)[batch.real][None])  # [1, row - prefix, heads, dim], in row order
        return torch.cat(outputs, dim=1), None
    for a, b in packed_layout.segments:
        if not p:
            outputs.append(attend(query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], None))
            continue
        own = torch.ones(b - a, b - a, dtype=torch.bool, device=query.device).tril()
        mask = torch.cat([torch.ones(b - a, p, dtype=torch.bool, device=query.device), own], dim=1)
        keys = torch.cat([key[:, :, :p], key[:, :, a:b]], dim=2)
        values = torch.cat([value[:, :, :p], value[:, :, a:b]], dim=2)
        outputs.append(attend(query[:, :, a:b], keys, values, mask[None, None]))
    return torch.cat(outputs, dim=1), None


def no_mask(*args, **kwargs) -> None:
    """The mask builder of ``segment_attention``, which needs none."""
    return None


@contextlib.contextmanager
def packed_attention(model: torch.nn.Module) -> Iterator[None]:
    """``model`` attends through ``segment_attention`` inside the block, and as before after it
    (an engine sharing the model keeps its own attention)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(ATTENTION, segment_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, no_mask)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    previous = base.config._attn_implementation
    base.set_attn_implementation(ATTENTION)
    try:
        yield
    finally:
        base.set_attn_implementation(previous)


def trained_logits(model: torch.nn.Module, row: PackedRow, batched: bool | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits at the positions of ``row`` that predict a trained token, and those tokens, in
    row order (inside ``packed_attention``): one forward pass of the whole model (a sharded
    model gathers its weights in its own forward), the LM head only at those positions."""
    device = module_device(model)
    ids = torch.tensor([row.input_ids], device=device)
    positions = torch.tensor([row.position_ids], device=device)
    # chosen on the host: no device sync, and the same on every device (torch's 'meta' included)
    trained = [i for i, target in enumerate(row.targets) if target != IGNORE]
    out = model(input_ids=ids, position_ids=positions, use_cache=False,
                logits_to_keep=torch.tensor(trained, device=device),
                packed_layout=SegmentLayout.of(row, device, batched))
    return out.logits[0], torch.tensor([row.targets[i] for i in trained], device=device)


def packed_nll(model: torch.nn.Module, row: PackedRow, batched: bool | None = None) -> torch.Tensor:
    """The summed negative log-likelihood of the trained tokens of ``row`` (inside
    ``packed_attention``)."""
    logits, targets = trained_logits(model, row, batched)
    return -token_logprobs(logits, targets, 1.0).sum()
