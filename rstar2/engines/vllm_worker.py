"""Weights handed to an in-process vLLM engine: a worker extension and a shared-memory file.

``VLLMEngine.update_weights(state_dict)`` has the tensors in the engine's own process (a
single-GPU learner's model, or the state dict a learner gathered), while vLLM's workers run in
processes of their own. vLLM calls into its workers only with data it can serialise
(``collective_rpc`` goes through msgpack: a method *name* and plain arguments, never a
function or a tensor), so the weights travel the way TRL, verl and OpenRLHF send theirs: the
control call carries names, dtypes, shapes and byte offsets, and the bytes go through shared
memory on the node.

* ``SharedWeights`` (this process): a file in ``/dev/shm`` (the temporary directory where
  that is missing or too small) holding one bucket of tensors at a time;
* ``WeightLoader``: the ``worker_extension_cls`` vLLM mixes into every worker; its
  ``rstar2_load_shared(path, size, rows)`` maps the file and loads each tensor with the
  worker's own ``model.load_weights``, which maps the trainer's parameter names onto vLLM's
  fused layers and shards them for tensor parallelism.

A worker is on the same node as its engine (vLLM's multiprocessing executor; a Ray member
keeps its tensor-parallel workers on its one node), so every worker opens the same file.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Mapping

import torch

from rstar2.weights.wire import Manifest, dtype_name, nbytes

ALIGN = 64  # every tensor starts on this byte boundary, so it can be viewed in its dtype
EXTENSION = f"{__name__}.WeightLoader"
Row = list  # [name, dtype name, shape, byte offset]: one tensor of a bucket


def aligned(size: int) -> int:
    return -(-size // ALIGN) * ALIGN


def shared_directory(size: int) -> str:
    """``/dev/shm`` (memory, no disk) when it has room for ``size`` bytes, else the
    temporary directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        stats = os.statvfs(shm)
        if stats.f_bavail * stats.f_frsize > 2 * size:
            return shm
    return tempfile.gettempdir()


class SharedWeights:
    """One file, reused for every bucket of an update, removed on ``close``."""

    def __init__(self, manifest: Manifest, bucket_indices: list[list[int]]):
        self.size = max((self.layout(manifest, bucket)[1] for bucket in bucket_indices),
                        default=ALIGN)
        self.path = os.path.join(shared_directory(self.size), f"rstar2-weights-{uuid.uuid4().hex}")
        self.buffer = torch.from_file(self.path, shared=True, size=self.size, dtype=torch.uint8)

    @staticmethod
    def layout(manifest: Manifest, bucket: list[int]) -> tuple[list[Row], int]:
        """The rows of ``bucket`` and the bytes they take."""
        rows, offset = [], 0
        for index in bucket:
            name, shape, dtype = manifest[index]
            rows.append([name, dtype, list(shape), offset])
            offset += aligned(nbytes(shape, dtype))
        return rows, offset

    def write(self, state_dict: Mapping[str, torch.Tensor], manifest: Manifest,
              bucket: list[int]) -> list[Row]:
        """The bucket's tensors into the file (from any device); its rows."""
        rows, _ = self.layout(manifest, bucket)
        for name, _, _, offset in rows:
            flat = state_dict[name].detach().contiguous().view(-1).view(torch.uint8)
            self.buffer[offset:offset + flat.numel()].copy_(flat)
        return rows

    def close(self) -> None:
        del self.buffer
        if os.path.exists(self.path):
            os.unlink(self.path)


def read_rows(path: str, size: int, rows: list[Row]) -> list[tuple[str, torch.Tensor]]:
    """The tensors ``rows`` describe, viewed (not copied) from the file at ``path``: valid
    until the sender writes the next bucket into it, which it does once the call that read
    them has returned (the model's ``load_weights`` copies them into its parameters)."""
    buffer = torch.from_file(path, shared=False, size=size, dtype=torch.uint8)
    weights = []
    for name, dtype, shape, offset in rows:
        dtype = getattr(torch, dtype)
        count = nbytes(tuple(shape), dtype_name(dtype))
        weights.append((name, buffer[offset:offset + count].view(dtype).view(shape)))
    return weights


class WeightLoader:
    """vLLM's ``worker_extension_cls`` (``EXTENSION``): vLLM adds these methods to every
    worker, and ``collective_rpc`` calls them by name. Names start with ``rstar2_`` so they
    never clash with the worker's own (vLLM refuses an extension that does)."""

    def rstar2_load_shared(self, path: str, size: int, rows: list[Row]) -> int:
        """Load the tensors ``rows`` name from the shared file into this worker's model;
        how many were loaded."""
        weights = read_rows(path, size, rows)
        self.get_model().load_weights(weights=weights)
        return len(weights)
