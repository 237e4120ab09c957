"""The warm worker's heap in transparent huge pages, which makes each call's fork cheaper.

fork + exit cost is proportional to the page-table entries of the warm worker (tens of MB of
Python objects): with the heap in 2 MiB pages instead of 4 KiB ones each call is cheaper
(docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MADV_HUGEPAGE, HUGE_PAGE = 14, 2 << 20
MADV_COLLAPSE = 25  # Linux 6.1+; elsewhere madvise fails and the heap stays as it is


def keep_heap_in_huge_pages(size: int = 64 << 20) -> None:
    """Grow the heap once and back it with transparent huge pages.

    Needs PYTHONMALLOC=malloc (set by the service) so Python objects live on glibc's heap;
    this does by hand what GLIBC_TUNABLES=glibc.malloc.hugetlb=1 would do, because glibc
    ignores tunables in a process started with capabilities.
    """
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)  # keep the heap: never hand it back
    libc.mallopt(M_TOP_PAD, size)
    libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)  # medium blocks from the heap too
    libc.free(ctypes.c_void_p(libc.malloc(1 << 20)))  # grows the heap by the pad
    advise_heap(MADV_HUGEPAGE)


def collapse_heap() -> None:
    """Put the heap back into huge pages (after the first calls split some)."""
    advise_heap(MADV_COLLAPSE)


def advise_heap(advice: int) -> None:
    """madvise the heap's whole huge pages (from the first 2 MiB boundary in it)."""
    with open("/proc/self/maps") as maps:
        heap = [line.split()[0] for line in maps if line.rstrip().endswith("[heap]")]
    if not heap:
        return
    low = int(heap[0].split("-")[0], 16)
    high = int(heap[-1].split("-")[1], 16)
    start = -(-low // HUGE_PAGE) * HUGE_PAGE
    if high - start >= HUGE_PAGE:
        libc = ctypes.CDLL(None)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise(start, (high - start) // HUGE_PAGE * HUGE_PAGE, advice)
