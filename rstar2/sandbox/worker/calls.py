"""One call from the worker's side: fork its child ahead of time, hand it the request, watch
it to its end, and clean up after it so that nothing of it reaches the next call.

A request whose text has no UTF-8 form (a lone surrogate, which JSON can carry) is answered
as an ``error`` without running: no program could be given it, and it must never take the
worker down.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass

from .child import STDIN_FILE, become_child
from .procs import kill_everything_else
from .state import WorkerState
from .supervise import CappedBuffer, drain, drain_to_end, finished_record, outcome_of, supervise


def wipe_contents(directory: str, keep: frozenset[str] = frozenset()) -> None:
    """Delete everything a call left in the private tmp, even what it made unreadable.

    ``keep`` names the entries that were there before any call: mount points of a Python
    installed under /tmp, which are read-only.
    """

    def make_writable_and_retry(function, path, _exc):
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        function(path)

    for entry in os.scandir(directory):
        if entry.name in keep:
            continue
        if not entry.is_dir(follow_symlinks=False):
            os.unlink(entry.path)
            continue
        try:
            os.rmdir(entry.path)  # most calls leave their directory empty: no rmtree needed
        except OSError:
            shutil.rmtree(entry.path, onerror=make_writable_and_retry)




@dataclass
class Standby:
    """A child forked ahead of its call: waiting for the request on ``request_w``."""

    pid: int
    request_w: int
    pipes: tuple[int, int, int]  # stdout, stderr, final record (read ends)


def fork_standby(state: WorkerState) -> Standby:
    """Fork the next call's child now, while the worker is idle, so that the fork (the
    costliest step of a call) is not on the call's latency path. It gets the fresh empty
    call directory and its pipes, and runs nothing until the request arrives."""
    os.mkdir(state.call_dir, 0o700)
    if state.uid is not None:
        os.chown(state.call_dir, state.uid, state.uid)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    req_r, req_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        for fd in (req_w, out_r, err_r, res_r, *state.control_fds):  # EOFs must not wait on us
            os.close(fd)
        become_child(state, req_r, out_w, err_w, res_w)
    for fd in (out_w, err_w, res_w, req_r):
        os.close(fd)
    return Standby(pid, req_w, (out_r, err_r, res_r))


def hand_over(state: WorkerState, standby: Standby, request: dict, payload: bytes) -> Standby:
    """Give the request (``payload``: its JSON as the service sent it) to the standby child,
    writing its stdin file first; if the child died while waiting (killed from outside), to a
    fresh one."""
    if request.get("stdin"):
        with open(os.path.join(state.tmp_root, STDIN_FILE), "w", encoding="utf-8") as f:
            f.write(request["stdin"])
    try:
        write_all(standby.request_w, payload)
    except BrokenPipeError:
        os.close(standby.request_w)
        for fd in standby.pipes:
            os.close(fd)
        kill_everything_else()
        shutil.rmtree(state.call_dir, ignore_errors=True)
        return hand_over(state, fork_standby(state), request, payload)
    os.close(standby.request_w)
    return standby


def write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def unencodable(request: dict) -> dict | None:
    """The ``error`` outcome of a request whose code or stdin has no UTF-8 form, else None."""
    for field in ("code", "stdin"):
        try:
            request.get(field, "").encode("utf-8")
        except UnicodeEncodeError as exc:
            note = (f"[rstar2 sandbox: the call's {field} is not valid text ({exc.reason} at "
                    f"character {exc.start}); it was not run]\n")
            return {"status": "error", "stdout": "", "stderr": note, "result": None, "duration_s": 0.0}
    return None


def run_call(state: WorkerState, standby: Standby, request: dict, payload: bytes) -> tuple[dict, list[int]]:
    """Run one request in the standby child; return its outcome and the pipes to close afterwards.

    When the child ends by itself the outcome is complete once its pipes are drained, so the
    kill of leftovers and the wipe of /tmp (``clean_up_after``) can wait until the answer is sent.
    """
    started = time.monotonic()
    standby = hand_over(state, standby, request, payload)
    out_r, err_r, res_r = standby.pipes
    cap = state.limits.output_cap
    stdout, stderr, result = CappedBuffer(cap), CappedBuffer(cap), bytearray()
    pipes = {out_r: stdout, err_r: stderr, res_r: result}
    wait_status = supervise(standby.pid, pipes, result, started + request["timeout_s"])
    duration = time.monotonic() - started
    finished = finished_record(result)
    if wait_status is None and finished is None:  # deadline: stop the whole tree, collect its output
        kill_everything_else()
        drain_to_end(pipes, until=time.monotonic() + 1.0)
    else:
        for fd, sink in pipes.items():
            drain(fd, sink)
    status, note = outcome_of(wait_status, finished)
    return {
        "status": status,
        "stdout": stdout.text(),
        "stderr": stderr.text() + note,
        "result": shown_value(finished, cap) if status == "ok" else None,
        "duration_s": round(duration, 6),
    }, list(pipes)


def shown_value(finished: dict | None, cap: int) -> str | None:
    """The last-expression repr the runner reported (None if the program exited on its own)."""
    shown = finished and finished.get("result")
    if not isinstance(shown, str):
        return None
    return shown if len(shown) <= cap else shown[:cap] + "\n[rstar2 sandbox: result truncated]"


def clean_up_after(state: WorkerState, pipes: list[int]) -> None:
    """Kill whatever the call left running, close its pipes, wipe the private tmp."""
    kill_everything_else()
    for fd in pipes:
        os.close(fd)
    wipe_contents(state.tmp_root, state.tmp_keep)
