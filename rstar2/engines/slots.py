"""The embedded engine's KV memory and the attention that reads it.

Two kinds of KV live here:

* ``PrefixBlock`` -- the keys/values of a token prefix shared by many sequences (the system
  prompt every rollout starts with, or the prompt all 2G rollouts of a question share). It is
  computed once and read by every sequence that starts with it, never copied.
* ``SlotCache`` -- one slot per resident sequence holding the keys/values of everything after
  its block. Active sequences occupy slots ``0..n-1`` so a decode step reads one contiguous
  range; sequences write at their own positions, so sequences of any length share a batch.

Attention for a batch is *cascade attention*: each query attends to its block and to its own
slot separately, and the two partial results are merged exactly with their log-sum-exps. The
block part is one dense matmul for all rows of a block instead of a per-row pass over the same
keys, which is what makes long shared system prompts cheap to decode against. Merging needs
the log-sum-exp, which only the CPU flash kernel returns; on a GPU the engine instead copies
a block into each slot that reads it (the block still saves its prefill) and attention is one
fused ``scaled_dot_product_attention`` call per layer over the slots, no merge, which is also
what lets a decode step be captured as a CUDA graph (``engines.bucketed``).

The model is unchanged: ``install(model)`` registers ``slot_attention`` as the model's
attention implementation; it reads an ``AttentionPlan`` passed as the keyword ``kv_plan`` to
the model's forward, and without one it is exactly SDPA, so the same model still serves
ordinary forward passes.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import sys
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

ATTENTION_NAME = "rstar2_slots"


@dataclass(eq=False)
class PrefixBlock:
    """Keys/values of ``tokens``, shared read-only by every sequence that starts with them."""

    tokens: tuple[int, ...]
    k: torch.Tensor  # [layers, kv_heads, len, head_dim]
    v: torch.Tensor

    def __len__(self) -> int:
        return len(self.tokens)


class SlotCache:
    """Per-sequence keys/values, ``[layers, slots, kv_heads, length, head_dim]``.

    With a ``capacity`` (slots, length) on the CPU, the first ``reserve`` maps all of it at
    once as address space the operating system fills with zeros on first touch
    (``reserved_zeros``): only the pages sequences write become resident, so memory follows
    the keys actually held -- a slot's row is as resident as the longest sequence it has
    held since the last ``clear`` -- not slots x the longest sequence, and the cache never
    moves. Where the system refuses such a mapping, and on other devices, the cache is
    grown on demand (more slots, longer slots) by reallocating and copying.

    Growing copies the whole cache and holds the old one and the new one at once, so it is
    kept rare: slots grow by half again (at least 8), and the engine reserves for all the
    requests it admits at once (``HFEngine.admit``); a length grows by a quarter again,
    rounded up to 64 positions, not doubled: a doubled cache of many slots is gigabytes of
    keys no sequence reaches.

    With ``spare`` 1 every slot keeps one more column than asked for, its last (``scratch``):
    no token is ever stored there, so fixed-shape decode steps can point their padding rows
    at it without touching a parked sequence's keys."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype, device, spare: int = 0,
                 capacity: tuple[int, int] | None = None):
        shape = (layers, 0, kv_heads, 0, head_dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        self.spare = spare
        self.capacity = capacity if self.k.device.type == "cpu" else None

    @property
    def slots(self) -> int:
        return self.k.shape[1]

    @property
    def length(self) -> int:
        return self.k.shape[3]

    @property
    def scratch(self) -> int:
        """The spare column's position (only meaningful with ``spare``)."""
        return self.length - 1

    def reserve(self, slots: int, length: int) -> None:
        """Make room for ``slots`` slots of ``length`` positions (class docstring)."""
        length += self.spare
        if slots <= self.slots and length <= self.length:
            return
        if self.capacity is not None and (self.slots or self.map_capacity()):
            if slots > self.slots or length > self.length:
                raise ValueError(f"{slots} slots of {length} positions: beyond the cache's "
                                 f"capacity of {self.slots} x {self.length}")
            return
        new_slots = self.slots if slots <= self.slots else max(slots, self.slots * 3 // 2, 8)
        new_length = self.length if length <= self.length else -(-max(length, self.length * 5 // 4) // 64) * 64
        for name in ("k", "v"):
            old = getattr(self, name)
            new = old.new_zeros((old.shape[0], new_slots, old.shape[2], new_length, old.shape[4]))
            new[:, : old.shape[1], :, : old.shape[3]] = old
            setattr(self, name, new)

    def map_capacity(self) -> bool:
        """Map the whole ``capacity`` (class docstring); False, and growth from then on, where
        the system refuses."""
        slots, length = self.capacity
        layers, _, kv_heads, _, head_dim = self.k.shape
        shape = (layers, slots, kv_heads, length + self.spare, head_dim)
        k, v = reserved_zeros(shape, self.k.dtype), reserved_zeros(shape, self.v.dtype)
        if k is None or v is None:
            self.capacity = None
            return False
        self.k, self.v = k, v
        return True

    def swap(self, i: int, j: int, used: int) -> None:
        """Exchange the first ``used`` positions of slots ``i`` and ``j``."""
        if i == j or used == 0:
            return
        for t in (self.k, self.v):
            held = t[:, i, :, :used].clone()
            t[:, i, :, :used] = t[:, j, :, :used]
            t[:, j, :, :used] = held

    def copy(self, src: int, dst: int, used: int) -> None:
        """Make slot ``dst`` hold the first ``used`` positions of slot ``src``."""
        for t in (self.k, self.v):
            t[:, dst, :, :used] = t[:, src, :, :used]

    def fill(self, slot: int, block: PrefixBlock) -> None:
        """Copy ``block``'s keys/values into the first positions of ``slot``."""
        self.reserve(self.slots, len(block))
        self.k[:, slot, :, : len(block)] = block.k
        self.v[:, slot, :, : len(block)] = block.v

    def clear(self) -> None:
        self.k = self.k[:, :0, :, :0].clone()
        self.v = self.v[:, :0, :, :0].clone()


MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux's flag (named in Python 3.13)
RESERVE_LIMIT = 1 << 40  # address space one reserved tensor may take (x86-64 gives 128 TiB)


def reserved_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
    """A zero CPU tensor of ``shape`` that takes address space, not memory: an anonymous
    private mapping, which Linux fills with zeros page by page as it is first written (reads
    of untouched pages see the shared zero page), without reserving swap for it up front
    (``MAP_NORESERVE``: a cache of many long slots is mostly never touched) and without huge
    pages (one 2 MiB page would make a whole slot's row resident at its first key). None
    elsewhere, beyond ``RESERVE_LIMIT``, or where the system refuses the mapping."""
    size = math.prod(shape) * dtype.itemsize
    if sys.platform != "linux" or not 0 < size <= RESERVE_LIMIT:
        return None
    try:
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE)
    except OSError:  # strict overcommit, or a limit on address space
        return None
    with contextlib.suppress(OSError):  # a kernel without transparent huge pages
        region.madvise(mmap.MADV_NOHUGEPAGE)
    with warnings.catch_warnings():  # the mapping is writable; torch warns for any buffer
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(region, dtype=dtype).view(shape)  # keeps ``region`` mapped


@dataclass(eq=False)
class AttentionPlan:
    """What one forward pass over ``n`` rows x ``T`` new tokens reads and writes.

    Row ``r`` lives in slot ``first_slot + r`` of ``k``/``v`` (``[layers, slots, heads, L, d]``),
    writes the key of its new token ``t`` at slot position ``write_pos[r, t]`` and lets that
    token see its slot positions ``<= write_pos[r, t]`` plus all of its block. ``groups`` lists,
    per block, the rows that read it (``None`` rows = all rows).
    """

    k: torch.Tensor
    v: torch.Tensor
    first_slot: int
    write_pos: torch.Tensor  # [n, T] long
    groups: list[tuple[PrefixBlock, torch.Tensor | None]]
    length: int | None = None  # slot positions read; None: up to the furthest write (a sync)
    mask: torch.Tensor | None = None  # additive [n, 1, T, L], built lazily in the model's dtype

    def additive_mask(self, dtype) -> torch.Tensor:
        if self.mask is None:
            length = self.length or int(self.write_pos.max()) + 1
            keys = torch.arange(length, device=self.write_pos.device)
            visible = keys[None, None, :] <= self.write_pos[:, :, None]
            mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
            self.mask = mask.masked_fill_(~visible, float("-inf"))[:, None]
        return self.mask


def attend(q, k, v, mask, scale):
    """Attention that also returns the log-sum-exp of the scores (for exact merging): the CPU
    flash kernel, the one that returns it.

    ``q`` ``[b, h, m, d]``, ``k``/``v`` ``[b, h, L, d]``, additive ``mask`` ``[b, 1, m, L]`` or
    None; returns the output ``[b, h, m, d]`` and the log-sum-exp ``[b, h, m]`` (float32).
    """
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, attn_mask=mask, scale=scale
    )
    return out, lse


def attend_block(q, block_k, block_v, scale):
    """All rows of ``q`` (``[n, kv_heads, m, d]``) against one shared block, as one matmul per
    KV head: rows are stacked along the query axis."""
    n, kv_heads, m, d = q.shape
    stacked = q.permute(1, 0, 2, 3).reshape(1, kv_heads, n * m, d)
    out, lse = attend(stacked, block_k[None], block_v[None], None, scale)
    out = out.view(kv_heads, n, m, d).permute(1, 0, 2, 3)
    lse = lse.view(kv_heads, n, m).permute(1, 0, 2)
    return out, lse


def slot_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                   kv_plan: AttentionPlan | None = None, **kwargs):
    """The model's attention: plain SDPA without a plan, cascade attention with one."""
    if kv_plan is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    plan, layer = kv_plan, module.layer_idx
    n, heads, steps, d = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    scale = scaling if scaling is not None else d**-0.5

    rows = torch.arange(plan.first_slot, plan.first_slot + n, device=query.device)
    rows = rows[:, None].expand(n, steps)
    plan.k[layer][rows, :, plan.write_pos] = key.transpose(1, 2).to(plan.k.dtype)
    plan.v[layer][rows, :, plan.write_pos] = value.transpose(1, 2).to(plan.v.dtype)

    mask = plan.additive_mask(query.dtype)
    length = mask.shape[-1]
    own_k = plan.k[layer][plan.first_slot : plan.first_slot + n, :, :length]
    own_v = plan.v[layer][plan.first_slot : plan.first_slot + n, :, :length]
    # Grouped-query attention without repeating keys: the query heads that share a KV head
    # are stacked along the query axis (row g*T + t), and the mask is tiled to match.
    packed = query.reshape(n, kv_heads, group * steps, d)
    if query.device.type == "cpu":
        out, lse = attend(packed, own_k, own_v, mask.repeat(1, 1, group, 1), scale)
        if plan.groups:
            out, lse = merge_blocks(packed, out, lse, plan.groups, layer, scale)
    else:  # one fused SDPA kernel (blocks are copied into the slots: see ``rstar2.engines.hf``)
        if plan.groups:
            raise ValueError("shared blocks are read in place only on the CPU")
        # a decode step's mask is the same for all query heads of a KV head: broadcast it
        packed_mask = mask if steps == 1 else mask.repeat(1, 1, group, 1)
        out = F.scaled_dot_product_attention(packed, own_k, own_v, attn_mask=packed_mask,
                                             scale=scale)
    out = out.reshape(n, heads, steps, d).transpose(1, 2)
    return out, None


def merge_blocks(packed, out, lse, groups, layer, scale):
    """Combine each row's own-slot attention with its block's, weighting each part by its
    share of the total softmax mass."""
    for block, rows in groups:
        q = packed if rows is None else packed[rows]
        block_out, block_lse = attend_block(q, block.k[layer], block.v[layer], scale)
        own_out = out if rows is None else out[rows]
        own_lse = lse if rows is None else lse[rows]
        total = torch.logaddexp(own_lse, block_lse)
        merged = (own_out * torch.exp(own_lse - total)[..., None].to(out.dtype)
                  + block_out * torch.exp(block_lse - total)[..., None].to(out.dtype))
        if rows is None:
            out, lse = merged, total
        else:
            out, lse = out.index_copy(0, rows, merged), lse.index_copy(0, rows, total)
    return out, lse


def install(model) -> None:
    """Make ``model`` attend through ``slot_attention`` (SDPA when no plan is passed)."""
    AttentionInterface.register(ATTENTION_NAME, slot_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_NAME, sdpa_mask)
    model.set_attn_implementation(ATTENTION_NAME)
