"""Process-tree helpers for the sandbox tests: what runs under a service, seen from the host."""

from __future__ import annotations

import os
from urllib.parse import urlparse


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


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


def descendants(pid: int) -> list[int]:
    """Every live process below pid (bwrap, workers, and anything a call left behind)."""
    parents = {int(e): parent_of(int(e)) for e in os.listdir("/proc") if e.isdigit()}
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        children = [p for p, parent in parents.items() if parent == current]
        found += children
        frontier += children
    return found


def worker_pids(url: str) -> list[int]:
    """The worker processes (the Python inside each bwrap) of a service."""
    pids = []
    for pid in descendants(service_pid(url)):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"worker.py" in argv and not argv.startswith(b"bwrap") and b"/bwrap" not in argv.split(b"\0")[0]:
            pids.append(pid)
    return pids
