"""Process-tree helpers for the sandbox tests: what runs under a service, seen from the host."""

from __future__ import annotations

import os
import time
from urllib.parse import urlparse

from rstar2.sandbox.worker.procs import parent_pids


def parent_of(pid: int) -> int | None:
    return parent_pids().get(pid)


def service_pid(url: str) -> int:
    """The pid of the local service listening on the URL's port (found by its command line)."""
    port = str(urlparse(url).port)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and b"--port" in argv and argv[argv.index(b"--port") + 1].decode() == port:
            return int(entry)
    raise LookupError(f"no sandbox service on port {port}")


def descendants(pid: int, parents: dict[int, int] | None = None) -> list[int]:
    """Every live process below pid (bwrap, workers, and anything a call left behind), from
    one snapshot of the process table (``parents``, taken now when not given)."""
    parents = parent_pids() if parents is None else parents
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        children = [p for p, parent in parents.items() if parent == current]
        found += children
        frontier += children
    return found


def worker_pids(url: str) -> list[int]:
    """The worker processes of a service: Python running the worker package, not forked from another one."""
    return workers_below(service_pid(url))


def workers_below(ancestor: int) -> list[int]:
    """The sandbox workers among the descendants of ancestor (a service, or a process running a pool)."""
    parents = parent_pids()

    def runs_worker(pid: int) -> bool:
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            return False
        return "bwrap" not in os.path.basename(argv[0].decode()) and argv[3:5] == [b"-m", b"worker"]

    # One snapshot for both: a child forked between two snapshots would look parentless.
    return [pid for pid in descendants(ancestor, parents)
            if runs_worker(pid) and not runs_worker(parents.get(pid, 0))]


def alive(pid: int) -> bool:
    """Whether pid is a running process (a zombie is dead: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] != b"Z"


def wait_until_gone(pids, wait_s: float = 15.0) -> list[int]:
    """Poll until none of pids is alive or wait_s passes; the ones still alive. The cleanup runs
    after the answer is sent, so on a loaded machine it may trail the call by a moment."""
    deadline = time.monotonic() + wait_s
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
