"""A warm sandbox worker: one process that runs calls one at a time, each in a fresh fork.

This file is started as a script (inside bubblewrap, see ``isolation.py``) and imports nothing
from rstar2, so that only this file and the Python installation need to be visible in the
sandbox. It imports the heavy modules model code uses once at start-up; each call then forks
a child that inherits them, so no call pays interpreter start-up or ``import sympy``.

Contract of one call, as enforced here:

* fresh process per call, started in a fresh empty directory under the private ``/tmp``
  that is deleted afterwards; no state survives from one call to the next. The process is
  forked ahead, once the previous call is cleaned up and when no request is already
  waiting, and waits for its request: the fork is then off the call's latency path
  (``fork_standby``);
* rlimits set before the snippet runs and not raisable by it (hard = soft; the child also
  drops to an unprivileged uid when the worker runs as root): CPU seconds, address space,
  processes, file size, open files, no core dumps;
* stdin comes from a file, stdout and stderr go to pipes that the worker drains, keeping the
  first ``output_cap`` bytes of each and a marker that says how much was dropped;
* the run's own outcome (exit status, last-expression repr) travels on a third pipe, so no
  text the program prints can be mistaken for it;
* at the deadline, and after every call whatever its end, every process of the call dies:
  as PID 1 of its own PID namespace the worker kills all other processes in it (``kill(-1)``),
  which catches ``setsid`` and double-forked children; without a namespace (unsafe mode) it is
  a child subreaper and kills every descendant it finds.

Protocol with the service on stdin/stdout: 4-byte big-endian length + JSON, both ways. The
worker first sends ``{"ready": true}``; then for each request ``{"code", "stdin", "timeout_s"}``
it answers one result ``{"status", "stdout", "stderr", "result", "duration_s"}``.
"""

from __future__ import annotations

import argparse
import ast
import atexit
import ctypes
import gc
import json
import os
import resource
import select
import shutil
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
import warnings
from dataclasses import dataclass


def keep_heap_in_huge_pages(size: int = 64 << 20) -> None:
    """Grow the heap once and back it with transparent huge pages.

    fork + exit cost is proportional to the page-table entries of the warm worker (tens of MB
    of Python objects): with the heap in 2 MiB pages instead of 4 KiB ones each call is
    cheaper (docs/benchmarks.md). Needs PYTHONMALLOC=malloc (set by the service) so Python objects live on
    glibc's heap; this does by hand what GLIBC_TUNABLES=glibc.malloc.hugetlb=1 would do,
    because glibc ignores tunables in a process started with capabilities.
    """
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)  # keep the heap: never hand it back
    libc.mallopt(M_TOP_PAD, size)
    libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)  # medium blocks from the heap too
    libc.free(ctypes.c_void_p(libc.malloc(1 << 20)))  # grows the heap by the pad
    advise_heap(MADV_HUGEPAGE)


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


WARM_MODULES = (
    "math", "cmath", "itertools", "functools", "fractions", "decimal", "collections",
    "statistics", "random", "re", "heapq", "bisect", "json", "string", "numpy", "sympy",
)
# sympy imports and builds much on first use; doing it here saves every call that time.
WARM_CODE = """
import sympy as sp, numpy as np
x, y = sp.symbols('x y')
sp.factor(x**4 - 1); sp.solve([x + y - 3, x - y - 1], [x, y]); sp.simplify(sp.sin(x)**2 + sp.cos(x)**2)
sp.expand((x + 1)**5); sp.isprime(97); sp.factorint(360); sp.Rational(1, 3) + sp.Rational(1, 6)
sp.integrate(x**2, (x, 0, 1)); sp.diff(sp.sin(x), x); sp.nsimplify(0.5); sp.Matrix([[1, 2], [3, 4]]).det()
sp.binomial(10, 3); sp.N(sp.pi, 30); sp.sqrt(8); sp.limit(sp.sin(x) / x, x, 0); sp.series(sp.exp(x), x, 0, 4)
sp.totient(100); sp.divisors(60); sp.gcd(12, 18); sp.Poly(x**2 + 1, x).all_coeffs(); sp.roots(x**2 - 1)
str(sp.Rational(1, 3)); sp.latex(x**2)
np.linalg.solve(np.eye(2), np.ones(2)); np.array([1.5]).sum(); str(np.arange(3))
"""
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
}
SNIPPET_FILENAME = "<code>"
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, MADV_HUGEPAGE, HUGE_PAGE = -1, -2, -3, 14, 2 << 20
MADV_COLLAPSE = 25  # Linux 6.1+; elsewhere madvise fails and the heap stays as it is
REHEARSAL_CALLS = 8
EXIT_ERROR = 1
STDIN_FILE = ".stdin"  # in the private tmp, outside the call's directory


def address_space_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def warm_up() -> None:
    """Import what model-written code usually imports, and touch sympy's lazy corners, once."""
    for name in WARM_MODULES:
        try:
            __import__(name)
        except ImportError:
            pass
    try:
        exec(WARM_CODE, {})
    except Exception:  # noqa: BLE001 -- warming is an optimisation, never a reason to fail
        pass


# ---------------------------------------------------------------- the child: runs one snippet


def split_last_expression(code: str) -> tuple[ast.Module, ast.Expression | None]:
    """Split source into the statements to exec and a final expression to show, as IPython."""
    tree = ast.parse(code, SNIPPET_FILENAME, "exec")
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body.pop()
        return tree, ast.Expression(last.value)
    return tree, None


def print_snippet_traceback(exc: BaseException) -> None:
    """Print the traceback as Python would, without the worker's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))


def run_snippet(code: str, result_fd: int) -> int:
    """Run the code as __main__ and return the process exit code.

    The last act is the record on ``result_fd`` (last repr and exit code, one JSON line),
    written after stdout and stderr are flushed and closed: once the worker has it, the call's
    output is complete and it need not wait for the process to finish exiting.
    """
    import linecache

    linecache.cache[SNIPPET_FILENAME] = (len(code), None, code.splitlines(True), SNIPPET_FILENAME)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    exit_code = 0
    shown = None
    try:
        body, last = split_last_expression(code)
        exec(compile(body, SNIPPET_FILENAME, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, SNIPPET_FILENAME, "eval"), namespace)
            shown = None if value is None else repr(value)
    except SystemExit as exit_request:
        code_ = exit_request.code
        if isinstance(code_, int) or code_ is None:
            exit_code = code_ or 0
        else:
            sys.stderr.write(f"{code_}\n")
            exit_code = EXIT_ERROR
    except BaseException as exc:  # noqa: BLE001 -- everything the snippet raises is its outcome
        print_snippet_traceback(exc)
        exit_code = EXIT_ERROR
    try:
        atexit._run_exitfuncs()
    except BaseException as exc:  # noqa: BLE001
        print_snippet_traceback(exc)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 -- a closed stream must not hide the outcome
            pass
    for fd in (0, 1, 2):
        os.close(fd)
    os.write(result_fd, json.dumps({"result": shown, "exit": exit_code}).encode() + b"\n")
    return exit_code


def set_limits(cfg: argparse.Namespace, timeout_s: float) -> None:
    """Resource limits of the call; hard = soft so the snippet cannot raise them."""
    cpu = int(timeout_s) + 1
    memory = cfg.warm_bytes + cfg.memory_mb * 1024 * 1024  # on top of what the fork inherits
    limits = {
        resource.RLIMIT_CPU: cpu,
        resource.RLIMIT_AS: memory,
        resource.RLIMIT_FSIZE: cfg.file_mb * 1024 * 1024,
        resource.RLIMIT_NOFILE: cfg.max_files,
        resource.RLIMIT_CORE: 0,
    }
    if cfg.uid is not None or os.getpid() != 1:
        # Counted per uid: meaningful when the child gets its own uid. As non-root in unsafe
        # mode it is a fork-bomb backstop shared with the user's other processes.
        limits[resource.RLIMIT_NPROC] = cfg.max_procs
    for which, value in limits.items():
        resource.setrlimit(which, (value, value))


def read_request(request_r: int) -> dict:
    """The standby child's request: everything the worker writes before closing the pipe.
    Nothing at all means the worker went away without a call for us: exit quietly."""
    data = bytearray()
    while chunk := os.read(request_r, 1 << 20):
        data += chunk
    if not data:
        os._exit(0)
    os.close(request_r)
    return json.loads(data)


def become_child(cfg, request_r, out_w, err_w, result_w) -> None:
    """In the forked child: wait for the request, wire fds, drop privileges, set limits, run
    the snippet, exit. Everything before the request arrives is done while the worker idles.
    The environment and the std streams were made once by the worker (``prepare_for_calls``):
    every page the child writes is a copy, so it builds as little as it can."""
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        atexit._clear()  # the worker's exit handlers are not the snippet's
        request = read_request(request_r)
        stdin_path = os.path.join(cfg.tmp_root, STDIN_FILE) if request.get("stdin") else os.devnull
        stdin_fd = os.open(stdin_path, os.O_RDONLY)
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        result_fd = os.dup2(result_w, 3)
        os.closerange(4, 1 << 16)
        os.chdir(cfg.call_dir)
        set_limits(cfg, request["timeout_s"])
        if cfg.uid is not None:
            os.setgroups([])
            os.setgid(cfg.uid)
            os.setuid(cfg.uid)
        sys.stdin, sys.stdout, sys.stderr = cfg.call_streams
        code = run_snippet(request["code"], result_fd)
    except BaseException as exc:  # noqa: BLE001 -- a failure before the snippet ran is an error too
        os.write(2, f"[rstar2 sandbox: could not start the call: {exc!r}]\n".encode())
        code = EXIT_ERROR
    os._exit(code)


# ---------------------------------------------------------------- the worker: supervises calls


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


def fork_standby(cfg: argparse.Namespace) -> Standby:
    """Fork the next call's child now, while the worker is idle, so that the fork (the
    costliest step of a call) is not on the call's latency path. It gets the fresh empty
    call directory and its pipes, and runs nothing until the request arrives."""
    os.mkdir(cfg.call_dir, 0o700)
    if cfg.uid is not None:
        os.chown(cfg.call_dir, cfg.uid, cfg.uid)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    req_r, req_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        for fd in (req_w, out_r, err_r, res_r, *cfg.control_fds):  # EOFs must not wait on us
            os.close(fd)
        become_child(cfg, req_r, out_w, err_w, res_w)
    for fd in (out_w, err_w, res_w, req_r):
        os.close(fd)
    return Standby(pid, req_w, (out_r, err_r, res_r))


def hand_over(cfg: argparse.Namespace, standby: Standby, request: dict, payload: bytes) -> Standby:
    """Give the request (``payload``: its JSON as the service sent it) to the standby child,
    writing its stdin file first; if the child died while waiting (killed from outside), to a
    fresh one."""
    if request.get("stdin"):
        with open(os.path.join(cfg.tmp_root, STDIN_FILE), "w", encoding="utf-8") as f:
            f.write(request["stdin"])
    try:
        write_all(standby.request_w, payload)
    except BrokenPipeError:
        os.close(standby.request_w)
        for fd in standby.pipes:
            os.close(fd)
        kill_everything_else()
        shutil.rmtree(cfg.call_dir, ignore_errors=True)
        return hand_over(cfg, fork_standby(cfg), request, payload)
    os.close(standby.request_w)
    return standby


def write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def run_call(cfg: argparse.Namespace, standby: Standby, request: dict, payload: bytes) -> tuple[dict, list[int]]:
    """Run one request in the standby child; return its outcome and the pipes to close afterwards.

    When the child ends by itself the outcome is complete once its pipes are drained, so the
    kill of leftovers and the wipe of /tmp (``clean_up_after``) can wait until the answer is sent.
    """
    started = time.monotonic()
    standby = hand_over(cfg, standby, request, payload)
    out_r, err_r, res_r = standby.pipes
    stdout, stderr, result = CappedBuffer(cfg.output_cap), CappedBuffer(cfg.output_cap), bytearray()
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
        "result": shown_value(finished, cfg.output_cap) if status == "ok" else None,
        "duration_s": round(duration, 6),
    }, list(pipes)


def shown_value(finished: dict | None, cap: int) -> str | None:
    """The last-expression repr the runner reported (None if the program exited on its own)."""
    shown = finished and finished.get("result")
    if not isinstance(shown, str):
        return None
    return shown if len(shown) <= cap else shown[:cap] + "\n[rstar2 sandbox: result truncated]"


def clean_up_after(cfg: argparse.Namespace, pipes: list[int]) -> None:
    """Kill whatever the call left running, close its pipes, wipe the private tmp."""
    kill_everything_else()
    for fd in pipes:
        os.close(fd)
    wipe_contents(cfg.tmp_root, cfg.tmp_keep)


# ---------------------------------------------------------------- protocol with the service


def read_exactly(stream, size: int) -> bytes:
    """``size`` bytes from an unbuffered stream (fewer only at end of file)."""
    data = bytearray()
    while len(data) < size and (chunk := stream.read(size - len(data))):
        data += chunk
    return bytes(data)


def read_message(stream) -> bytes | None:
    """One message's JSON text (None at end of file)."""
    header = read_exactly(stream, 4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack(">I", header)
    return read_exactly(stream, size)


def request_waiting(stream) -> bool:
    """Whether the service has already sent the next request (the worker will not idle)."""
    return bool(select.select([stream], [], [], 0)[0])


def write_message(stream, message: dict) -> None:
    payload = json.dumps(message).encode()
    stream.write(struct.pack(">I", len(payload)) + payload)
    stream.flush()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uid", type=int, default=None, help="run calls as this uid (root only)")
    parser.add_argument("--memory-mb", type=int, default=1024)
    parser.add_argument("--max-procs", type=int, default=64)
    parser.add_argument("--max-files", type=int, default=256)
    parser.add_argument("--file-mb", type=int, default=64)
    parser.add_argument("--output-cap", type=int, default=65536)
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ[name] = "1"  # before numpy: fork() is only safe from a single-threaded process
    os.environ["MPLBACKEND"] = "Agg"
    cfg = parse_args(argv)
    # The service talks on our stdin/stdout; move them out of the way of the snippets.
    control_in = os.fdopen(os.dup(0), "rb", buffering=0)  # unbuffered: `request_waiting` sees all
    control_out = os.fdopen(os.dup(1), "wb")
    cfg.control_fds = (control_in.fileno(), control_out.fileno())
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    # A standby child killed from outside must be a BrokenPipeError, not the worker's death.
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # Same-uid snippets (unprivileged mode) could signal us: interrupts must not stop the worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    libc = ctypes.CDLL(None)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # our /proc entries (fds, memory) stay unreadable
    if os.getpid() != 1:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of a call come back to us
    cfg.tmp_root = "/tmp" if os.getpid() == 1 else tempfile.mkdtemp(prefix="rstar2-sandbox-")
    cfg.tmp_keep = frozenset(os.listdir(cfg.tmp_root))
    keep_heap_in_huge_pages()
    warm_up()
    gc.freeze()  # a collection in a call would touch, and so copy, every inherited object
    cfg.warm_bytes = address_space_bytes()
    prepare_for_calls(cfg)
    serve_in_own_arena(cfg, control_in, control_out)


def prepare_for_calls(cfg: argparse.Namespace) -> None:
    """Make, once, what every call's child would otherwise build after the fork: its
    environment (the worker needs its own no longer) and its std streams (never written by
    the worker, so they are empty whenever a child is forked)."""
    cfg.call_dir = os.path.join(cfg.tmp_root, "call")
    os.environ.clear()
    os.environ.update(CHILD_ENV, HOME=cfg.call_dir, TMPDIR=cfg.call_dir)
    tempfile.tempdir = None
    cfg.call_streams = (
        open(0, "r", encoding="utf-8", errors="replace", closefd=False),
        open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False),
        open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False),
    )


def serve_in_own_arena(cfg: argparse.Namespace, control_in, control_out) -> None:
    """Serve calls from a thread of our own while the main thread waits for it.

    glibc gives a new thread its own malloc arena, so the per-call objects of the serving
    loop (and of each call's child, forked from this thread) live there instead of in the
    holes of the warm heap. The warm heap is then written far less while a child shares it:
    fewer copy-on-write faults, and its transparent huge pages stay whole (a write to a
    shared huge page splits it, and every later fork copies 512 entries instead of one).
    Forking from this thread is safe: the only other thread waits in ``join`` holding no
    lock, and the child gets this thread alone.
    """
    # Python 3.12+ warns about any fork in a multi-threaded process; this one is deliberate.
    warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded", category=DeprecationWarning)
    failure: list[BaseException] = []

    def serve_or_record_failure() -> None:
        try:
            serve(cfg, control_in, control_out)
        except BaseException as error:  # noqa: BLE001 -- re-raised in the main thread below
            failure.append(error)

    thread = threading.Thread(target=serve_or_record_failure, name="serve-calls")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def rehearse(cfg: argparse.Namespace) -> None:
    """Run a few empty calls, then put the warm heap back into huge pages.

    The first calls write once to pages of the warm heap that no later call writes (lazy
    initialisations in the interpreter and the modules the loop uses); each such write to a
    page shared with a child splits its huge page. After them the heap is collapsed into huge
    pages again (``MADV_COLLAPSE``), which later calls then leave mostly whole.
    """
    payload = json.dumps({"code": "pass", "stdin": "", "timeout_s": 10.0}).encode()
    for _ in range(REHEARSAL_CALLS):
        _, pipes = run_call(cfg, fork_standby(cfg), json.loads(payload), payload)
        clean_up_after(cfg, pipes)
    advise_heap(MADV_COLLAPSE)


def serve(cfg: argparse.Namespace, control_in, control_out) -> None:
    """Answer requests until the service closes our stdin."""
    rehearse(cfg)
    standby = fork_standby(cfg)
    write_message(control_out, {"ready": True})
    while (payload := read_message(control_in)) is not None:
        request = json.loads(payload)
        outcome, pipes = run_call(cfg, standby or fork_standby(cfg), request, payload)
        write_message(control_out, outcome)
        del payload, request, outcome  # the next child is forked from this state: nothing of this call in it
        clean_up_after(cfg, pipes)
        # Fork ahead only when the worker would idle: a child alive while the worker works
        # makes each page the worker writes a copy-on-write fault, so under full load the
        # next child is forked on demand as before.
        standby = None if request_waiting(control_in) else fork_standby(cfg)


if __name__ == "__main__":
    main(sys.argv[1:])
