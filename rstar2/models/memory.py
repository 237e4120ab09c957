"""Large tensors reused instead of faulted in afresh: the C allocator's thresholds.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves a block larger than
its mmap threshold (which adapts, but never past 32 MiB) from fresh pages of the kernel and
unmaps it on ``free``, so an update that makes and frees the same activations and logits every
micro-batch takes every page's first-touch fault again each time, a measured share of a CPU
update's time (docs/benchmarks.md). ``keep_freed_memory`` raises the threshold and the heap's
trim threshold to 64 MiB, so freed blocks up to that size (a micro-batch's activations, a chunk
of logits) stay in the heap for the next allocation of their size. Larger blocks (an engine's
key/value cache, a whole weight) still come from and go back to the system: kept in the heap,
the holes they leave made the CPU demo's memory grow by gigabytes over a run (a 1 GiB
threshold: 15.8 GB at the end of a demo whose update needs about 6).

The ``rstar2`` command calls it at start; a program using the library calls it itself, or sets
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``. Other C libraries (musl, macOS) are
left as they are.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
THRESHOLD = 64 << 20  # blocks up to 64 MiB come from, and go back to, the heap


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds (module docstring) unless the user set them;
    whether they are raised now."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # not glibc
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, THRESHOLD))
