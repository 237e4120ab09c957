"""A function the pool tests run in worker processes: it burns CPU time, where `time:sleep`
spends only time on the clock."""

import time


def spin(cpu_seconds: float) -> float:
    """Compute for `cpu_seconds` of this process's CPU time; returns the CPU time it used."""
    started = time.process_time()
    while time.process_time() - started < cpu_seconds:
        sum(range(1_000))
    return time.process_time() - started
