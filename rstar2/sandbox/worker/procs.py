"""The process table as /proc shows it, and the killing of a call's processes: what a worker
kills after each call, and what the service kills when it replaces a worker. Standard library
only (read by the service and the worker)."""

from __future__ import annotations

import os
import signal


def parent_pids() -> dict[int, int]:
    """Every visible process and its parent, from one pass over /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return parents


def child_pids_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (this kernel may lack /proc/PID/task/TID/children)."""
    return [child for child, parent in parent_pids().items() if parent == pid]


def kill_everything_else() -> None:
    """Kill and reap every process of the call, detached ones included."""
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)  # as PID 1 of the namespace: everyone but us
        except ProcessLookupError:
            pass
        reap_all()
        return
    # Unsafe mode: we are a child subreaper, so orphans come back to us. Wait only for the
    # processes just killed: a detached child of one of them becomes ours when it dies, alive,
    # and the next pass kills it (waiting for any child would wait for it to end by itself).
    while children := child_pids_of(os.getpid()):
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def reap_all() -> None:
    """Wait for every child to end (call only once all of them were killed)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
