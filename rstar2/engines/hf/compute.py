"""Forward passes: prefill of new tokens, one decode step, the keys of a shared block.

Rows are residents of the slot table, fed left-padded in one batch: padding goes first (so
every row's last token is in the last column) and writes its garbage keys *after* the row's
real tokens, where decoding overwrites them. The model's attention reads the slots (and the
blocks) through an ``AttentionPlan`` (``rstar2.engines.slots``); with flat attention a decode
step is a fixed-shape pass (``rstar2.engines.bucketed``), replayed as a CUDA graph on a GPU.
"""

from __future__ import annotations

import torch

from rstar2.engines import cpu_kernels, slots
from rstar2.engines.bucketed import BucketedDecoder
from rstar2.engines.hf.requests import Resident
from rstar2.engines.hf.stack import DecodeStack
from rstar2.engines.hf.table import SlotTable


class Compute:
    """The model's passes over the residents of ``table``."""

    def __init__(self, model, table: SlotTable, flat: bool, max_batch_size: int,
                 prefill_tokens: int, cuda_graphs: bool, decode_kernels: bool):
        self.model, self.table, self.flat = model, table, flat
        self.prefill_tokens = prefill_tokens
        self.device = model.device
        self.decoder = BucketedDecoder(self.forward, table.cache, self.device, max_batch_size,
                                       cuda_graphs) if flat else None
        self.no_mask = torch.zeros((1, 1, 1, 1), dtype=torch.bool, device=self.device)
        self.stack: DecodeStack | None = None
        self.decode_path = "the model's forward pass" + (" (flat attention)" if flat else "")
        if not flat and decode_kernels:
            why_not = DecodeStack.why_not(model)
            if why_not is None:
                self.stack = DecodeStack(model, cpu_kernels.decode_kernels())
                self.decode_path = "fused CPU kernels"
            else:
                self.decode_path += f": no fused kernels ({why_not})"

    @property
    def kernels(self):
        """The fused CPU kernels where the step runs on them (its sampling too), else None."""
        return self.stack.kernels if self.stack is not None else None

    def weights_changed(self) -> None:
        """The model's weights may have changed: the fused step re-reads them."""
        if self.stack is not None:
            self.stack.refresh()

    def prefill(self, first: int, count: int) -> torch.Tensor:
        """Feed the pending tokens of residents ``first..first+count-1``, in passes of at most
        ``prefill_tokens`` padded tokens; returns each one's last-token logits."""
        residents = self.table.residents
        logits, start = [], first
        while start < first + count:
            end = start + 1
            longest = len(residents[start].pending)
            while end < first + count:
                longer = max(longest, len(residents[end].pending))
                if longer * (end - start + 1) > self.prefill_tokens:
                    break
                longest, end = longer, end + 1
            logits.append(self.feed(start, end))
            start = end
        return torch.cat(logits) if logits else torch.empty(0)

    def decode(self) -> torch.Tensor:
        """The logits after one more token of every active sequence."""
        rows = self.table.active
        if self.stack is not None:
            return self.fused(list(enumerate(rows)))
        if not self.flat:
            return self.feed(0, len(rows))
        logits = self.decoder.step([r.pending[0] for r in rows], [r.used for r in rows],
                                   [len(r.cached) for r in rows])
        for r in rows:
            r.cached.append(r.pending.pop())
        return logits

    def fused(self, rows: list[tuple[int, Resident]]) -> torch.Tensor:
        """Feed every pending token of ``rows`` ((slot, resident) pairs) in one pass of the
        fused kernels; returns the logits after each row's last token."""
        ids, positions, write, slot, row_block, last = [], [], [], [], [], []
        blocks: list[slots.PrefixBlock] = []
        index: dict[int, int] = {}  # id(block) -> its place in ``blocks``
        for s, r in rows:
            if r.block is not None and id(r.block) not in index:
                index[id(r.block)] = len(blocks)
                blocks.append(r.block)
            n = len(r.pending)
            ids += r.pending
            positions += range(len(r.cached), len(r.cached) + n)
            write += range(r.used, r.used + n)
            slot += [s] * n
            row_block += [-1 if r.block is None else index[id(r.block)]] * n
            last.append(len(ids) - 1)
        cache = self.table.cache
        cache.reserve(len(self.table.residents), max(write) + 1)
        logits = self.stack.step(torch.tensor(ids), torch.tensor(positions), torch.tensor(write),
                                 torch.tensor(slot), cache.k, cache.v, blocks,
                                 torch.tensor(row_block), torch.tensor(last))
        for _, r in rows:
            r.cached.extend(r.pending)
            r.pending = []
        return logits

    def feed(self, start: int, end: int) -> torch.Tensor:
        """Run the pending tokens of residents ``start..end-1`` through the model (left-padded
        into one batch) and return the logits after each one's last token."""
        rows = self.table.residents[start:end]
        width = max(len(r.pending) for r in rows)
        ids, write, position = [], [], []
        for r in rows:
            pad = width - len(r.pending)
            ids.append([0] * pad + r.pending)
            real = list(range(r.used, r.used + len(r.pending)))
            write.append(list(range(real[-1] + 1, real[-1] + 1 + pad)) + real)
            offset = len(r.cached) - r.used
            position.append([offset + w for w in write[-1]])
        write_t = torch.tensor(write, device=self.device)
        cache = self.table.cache
        cache.reserve(len(self.table.residents), int(write_t.max()) + 1)
        plan = slots.AttentionPlan(cache.k, cache.v, start, write_t, block_groups(rows))
        logits = self.forward(torch.tensor(ids, device=self.device),
                              torch.tensor(position, device=self.device), plan)
        for r in rows:
            r.cached.extend(r.pending)
            r.pending = []
        return logits

    def compute_block(self, tokens: tuple[int, ...], base: slots.PrefixBlock | None
                      ) -> slots.PrefixBlock:
        """Keys/values of ``tokens``, extending ``base`` (a block they start with) if given."""
        start = len(base) if base else 0
        shape = self.table.cache.k.shape
        store = slots.SlotCache(shape[0], shape[2], shape[4], self.table.cache.k.dtype, self.device)
        store.reserve(1, len(tokens))
        if base:
            store.fill(0, base)
        write = torch.arange(start, len(tokens), device=self.device)[None]
        plan = slots.AttentionPlan(store.k, store.v, 0, write, [])
        self.forward(torch.tensor([tokens[start:]], device=self.device), write, plan)
        return slots.PrefixBlock(tokens, store.k[:, 0, :, : len(tokens)].contiguous(),
                                 store.v[:, 0, :, : len(tokens)].contiguous())

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, plan: slots.AttentionPlan
                ) -> torch.Tensor:
        # The plan is the mask. A 4-D attention_mask is taken as already prepared, so
        # transformers builds none: its packed-sequence check reads a value back from the
        # device, which a CUDA graph cannot capture (and every step would pay for).
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=self.no_mask,
                         use_cache=False, logits_to_keep=1, kv_plan=plan)
        return out.logits[:, -1]


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
