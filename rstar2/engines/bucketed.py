"""Fixed-shape decode steps for the GPU: batch and length buckets, replayed as CUDA graphs.

    decoder = BucketedDecoder(compute.forward, table.cache, device, max_batch_size, graphs=True)
    logits = decoder.step(tokens, write, positions)        # [n, vocab]

A decode step of a small model is hundreds of small kernels; launched one by one from Python
the GPU idles between them. Here each step is padded to a *batch bucket* (powers of two up to
``max_batch_size``) and reads the slots up to a *length bucket* (powers of two, at least
``MIN_LENGTH``), so the shapes repeat and each (batch, length) pair is captured once as a
``torch.cuda.CUDAGraph`` whose replay launches the whole forward pass at once. The inputs
(token, position and slot position of every row) go through one static buffer filled by one
asynchronous copy; the logits come back in the graph's static output.

Padding rows must not disturb real sequences: they sit in slots ``n..bucket-1`` (free, or
parked sequences) and write their keys to the cache's *scratch* column (``SlotCache.spare``),
which holds no token of any sequence; their logits are dropped.

A graph reads the cache tensors by address, so graphs are dropped whenever the cache is
reallocated (it grows geometrically, so rarely). New weights copied into the model's
parameters in place (``update_weights``) keep the graphs valid. Without graphs (the CPU, or
``cuda_graphs`` off) the same padded step runs eagerly, which is how the CPU tests check it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rstar2.engines.slots import AttentionPlan, SlotCache
from rstar2.models.device import host_to_device

MIN_LENGTH = 256
Forward = Callable[[torch.Tensor, torch.Tensor, AttentionPlan], torch.Tensor]


def batch_bucket(n: int, max_batch_size: int) -> int:
    """The padded batch of ``n`` rows: the next power of two, at most ``max_batch_size``."""
    return min(1 << (n - 1).bit_length(), max(max_batch_size, n))


def length_bucket(length: int) -> int:
    """The slot positions a step reads: the next power of two, at least ``MIN_LENGTH``."""
    return max(MIN_LENGTH, 1 << (length - 1).bit_length())


@dataclass(eq=False)
class Captured:
    graph: torch.cuda.CUDAGraph
    inputs: torch.Tensor  # [3, batch] long: token, position, slot position
    logits: torch.Tensor  # [batch, vocab]


class BucketedDecoder:
    """Runs padded decode steps, from captured CUDA graphs when ``graphs`` (see module doc)."""

    def __init__(self, forward: Forward, cache: SlotCache, device: torch.device,
                 max_batch_size: int, graphs: bool):
        self.forward, self.cache, self.device = forward, cache, device
        self.max_batch_size = max_batch_size
        self.graphs_enabled = graphs and device.type == "cuda"
        self.graphs: dict[tuple[int, int], Captured] = {}
        self.graph_storage: tuple | None = None
        self.pool = torch.cuda.graph_pool_handle() if self.graphs_enabled else None

    def step(self, tokens: list[int], write: list[int], positions: list[int]) -> torch.Tensor:
        """Logits after one new token per row (row i: ``tokens[i]`` at slot position
        ``write[i]``, rotary position ``positions[i]``, in slot i)."""
        n = len(tokens)
        batch = batch_bucket(n, self.max_batch_size)
        length = length_bucket(max(write) + 1)
        self.cache.reserve(max(batch, self.cache.slots), length)
        pad = batch - n
        host = [tokens + [0] * pad, positions + [0] * pad, write + [self.cache.scratch] * pad]
        if not self.graphs_enabled:
            return self.run(host_to_device(host, torch.long, self.device), length)[:n]
        captured = self.graph(batch, length)
        if captured is None:
            return self.run(host_to_device(host, torch.long, self.device), length)[:n]
        captured.inputs.copy_(host_to_device(host, torch.long, self.device))
        captured.graph.replay()
        return captured.logits[:n]

    def run(self, inputs: torch.Tensor, length: int) -> torch.Tensor:
        """One forward pass of the padded batch ``inputs`` (``[3, batch]``)."""
        write = inputs[2][:, None]
        plan = AttentionPlan(self.cache.k, self.cache.v, 0, write, [], length=length)
        return self.forward(inputs[0][:, None], inputs[1][:, None], plan)

    def graph(self, batch: int, length: int) -> Captured | None:
        """The captured step of this bucket (capturing it now if needed); None if capture
        failed, after which steps run eagerly."""
        # addresses and shape: a new cache can land where the old one was, in another layout
        storage = (self.cache.k.data_ptr(), self.cache.v.data_ptr(), tuple(self.cache.k.shape))
        if storage != self.graph_storage:
            self.drop_graphs()
            self.graph_storage = storage
        key = (batch, length)
        if key not in self.graphs:
            try:
                self.graphs[key] = self.capture(batch, length)
            except RuntimeError as error:
                warnings.warn(f"CUDA graph capture failed, decoding eagerly: {error}", stacklevel=2)
                self.graphs_enabled = False
                self.drop_graphs()
                return None
        return self.graphs[key]

    def drop_graphs(self) -> None:
        """Forget every captured step, and the memory pool they shared: the allocator keeps a
        pool only while a graph captured into it lives, so a handle whose graphs are all gone
        cannot be captured into again (an internal assertion in the caching allocator)."""
        self.graphs.clear()
        if self.graphs_enabled:
            self.pool = torch.cuda.graph_pool_handle()

    def capture(self, batch: int, length: int) -> Captured:
        """Warm the step up on a side stream (lazy kernel and workspace set-up must not be
        captured), then capture it. Every row writes to the scratch column meanwhile."""
        inputs = torch.zeros((3, batch), dtype=torch.long, device=self.device)
        inputs[2] = self.cache.scratch
        with torch.cuda.device(self.device):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.run(inputs, length)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: the engine's worker captures while other threads may use CUDA
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                logits = self.run(inputs, length)
        return Captured(graph, inputs, logits)
