"""How many threads PyTorch should compute with now: the cores other processes leave free.

    governor = ThreadGovernor(most=2)          # the count cpu_threads() gives
    torch.set_num_threads(governor.threads())  # before each step; cheap, reads /proc at most twice a second

PyTorch's CPU operators split their work over OpenMP threads and wait for the slowest: when
another process keeps a core busy, the thread that shares it runs a fraction of the time and
every one of a decode step's few hundred parallel regions waits for it -- measured, a whole
command many times slower than with one thread fewer (docs/benchmarks.md, "A busy machine").
Other processes include rstar2's own sandbox and grading workers, which run in bursts beside
the engine.

The governor measures, about twice a second, how many cores the other processes used since its
last reading: the busy time of the cores this process may run on (``/proc/stat``) less this
process's own CPU time, over the wall time between. Averaged over the last few readings, where
the others keep more than 0.6 of a core busy the count drops by a core for each, and it comes
back once they use less than 0.35 of one per core taken (so a burst of tool calls does not make
it flap). ``most`` is never exceeded. Where the user fixed the count (``OMP_NUM_THREADS`` or
``--threads``), or ``/proc/stat`` cannot be read, there is no governor: ``for_this_process``
returns None.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable

READ_EVERY_S = 0.5
READINGS = 4  # averaged: about two seconds
SHED_ABOVE = 0.6  # cores' worth of other work that takes a thread away
RETURN_BELOW = 0.35  # ... and that gives it back (hysteresis)


def cores_busy(cpus: set[int]) -> float:
    """Seconds the ``cpus`` have been busy since boot (``/proc/stat``: all but idle and iowait)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    with open("/proc/stat") as stat:
        for line in stat:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                values = [int(v) for v in fields]
                total += sum(values) - values[3] - values[4]  # idle, iowait
    return total / ticks


class ThreadGovernor:
    """The thread count for the next step (module docstring)."""

    def __init__(self, most: int, busy: Callable[[], float] | None = None,
                 own: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.monotonic):
        cpus = os.sched_getaffinity(0)
        self.most = most
        self.busy = busy or (lambda: cores_busy(cpus))
        self.own, self.clock = own, clock
        self.current = most
        self.others: collections.deque[float] = collections.deque(maxlen=READINGS)
        self.last = (self.clock(), self.busy(), self.own())

    @classmethod
    def for_this_process(cls, most: int) -> ThreadGovernor | None:
        """A governor, unless the user fixed the thread count or this is not Linux."""
        if os.environ.get("OMP_NUM_THREADS", "").strip() or most < 2:
            return None
        try:
            return cls(most)
        except (OSError, ValueError, AttributeError):
            return None

    def threads(self) -> int:
        """The count to compute with now."""
        now = self.clock()
        if now - self.last[0] >= READ_EVERY_S:
            busy, own = self.busy(), self.own()
            wall = now - self.last[0]
            self.others.append(max(0.0, (busy - self.last[1]) - (own - self.last[2])) / wall)
            self.last = (now, busy, own)
            self.decide(sum(self.others) / len(self.others))
        return self.current

    def decide(self, others: float) -> None:
        taken = self.most - self.current  # threads given up to the others already
        if self.current > 1 and others - taken > SHED_ABOVE:
            self.current -= 1
        elif taken and others < taken - (1 - RETURN_BELOW):
            self.current += 1
