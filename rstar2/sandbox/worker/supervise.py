"""Watching one call's child: drain its pipes (keeping a capped share of each), wait for its
final record, its exit or its deadline, and name the outcome."""

from __future__ import annotations

import json
import os
import select
import signal
import time

from .child import EXIT_ERROR


class CappedBuffer:
    """Keeps the first ``cap`` bytes of a stream and counts the rest (a sink like a
    ``bytearray``: ``extend``)."""

    def __init__(self, cap: int):
        self.cap, self.data, self.dropped = cap, bytearray(), 0

    def extend(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        text = self.data.decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[rstar2 sandbox: output truncated, {self.dropped} more bytes dropped]\n"
        return text



def finished_record(record: bytearray) -> dict | None:
    """The runner's final record, if it was written completely."""
    if not record.endswith(b"\n"):
        return None
    try:
        finished = json.loads(record.decode())
        return finished if isinstance(finished.get("exit"), int) else None
    except (ValueError, AttributeError):
        return None


def outcome_of(wait_status: int | None, finished: dict | None) -> tuple[str, str]:
    """Map how the call ended to an outcome and a note for stderr."""
    if finished is not None:
        code = finished["exit"]
    elif wait_status is None:
        return "timeout", "[rstar2 sandbox: timed out; the call's processes were killed]\n"
    elif os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        if sig == signal.SIGXCPU:
            return "timeout", "[rstar2 sandbox: CPU time limit exceeded]\n"
        return "killed", f"[rstar2 sandbox: killed by signal {signal.Signals(sig).name}]\n"
    else:
        code = os.waitstatus_to_exitcode(wait_status)
    return ("ok", "") if code == 0 else ("error", "" if code == EXIT_ERROR else f"[exit code {code}]\n")


def supervise(pid: int, pipes: dict[int, CappedBuffer | bytearray], record: bytearray, deadline: float):
    """Drain the child's pipes until its final record, its exit, or the deadline.

    Returns the wait status if the child was reaped here, else None. One read per readiness
    event (poll is level-triggered): no loop that ends in an exception on every call.
    """
    poller = select.poll()
    pidfd = os.pidfd_open(pid)
    poller.register(pidfd, select.POLLIN)
    for fd in pipes:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    wait_status = None
    try:
        while wait_status is None and not record.endswith(b"\n") and (remaining := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(remaining * 1000 + 1):
                if fd == pidfd:
                    wait_status = os.waitpid(pid, 0)[1]
                elif not read_once(fd, pipes[fd]):
                    poller.unregister(fd)
    finally:
        os.close(pidfd)
    return wait_status


def read_chunk(fd: int) -> bytes | None:
    """What one read of a non-blocking pipe gives: b'' at end of file, None if nothing yet."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None


def read_once(fd: int, sink) -> bool:
    """One read of what is available into the sink; False at end of file."""
    chunk = read_chunk(fd)
    if chunk:
        sink.extend(chunk)
    return chunk != b""


def drain(fd: int, sink) -> bool:
    """Read what is available; return False at end of file."""
    while chunk := read_chunk(fd):
        sink.extend(chunk)
    return chunk is None


def drain_to_end(pipes: dict, until: float) -> None:
    """Read what the killed call left in its pipes (bounded, never blocks)."""
    for fd, sink in pipes.items():
        while drain(fd, sink) and time.monotonic() < until:
            time.sleep(0.001)
