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

The heap then keeps what an RL update freed (its activations) until it is reused, which the
rollouts that follow do not do (their key/value cache is one large block of its own):
``return_freed_memory`` hands the heap's free pages back to the system after each update, so a
run's memory is the larger of its update and its rollouts, not their sum.

The ``rstar2`` command calls ``keep_freed_memory`` at start; a program using the library calls
it itself, or sets ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``. Other C libraries
(musl, macOS) are left as they are. Where the process runs on tcmalloc (the command preloads it
where the machine has it: ``rstar2.launch``), tcmalloc keeps freed blocks of every size itself,
and ``return_freed_memory`` asks it, not glibc, to give them back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
THRESHOLD = 64 << 20  # blocks up to 64 MiB come from, and go back to, the heap


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The C library where it is glibc (it has ``mallopt`` and ``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt, libc.malloc_trim  # noqa: B018 (glibc's own)
    except (OSError, AttributeError, TypeError):
        return None
    return libc


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds (module docstring) unless the user set them;
    whether they are raised now."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    libc = glibc()
    if libc is None:
        return False
    return (bool(libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD))
            and bool(libc.mallopt(M_TRIM_THRESHOLD, THRESHOLD)))


@functools.cache
def tcmalloc() -> ctypes.CDLL | None:
    """The process's symbols where tcmalloc is among them (preloaded), else None."""
    try:
        process = ctypes.CDLL(None)
        process.MallocExtension_ReleaseFreeMemory  # noqa: B018 (tcmalloc's C API)
    except (OSError, AttributeError, TypeError):
        return None
    return process


def return_freed_memory() -> bool:
    """Give the heap's free pages back to the system (tcmalloc's ``ReleaseFreeMemory`` where the
    process runs on it, else glibc's ``malloc_trim``; module docstring); whether the allocator
    was asked (glibc: whether any pages were given back)."""
    if (allocator := tcmalloc()) is not None:
        allocator.MallocExtension_ReleaseFreeMemory()
        return True
    libc = glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
