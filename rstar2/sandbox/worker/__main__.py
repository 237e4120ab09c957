"""The worker program: start-up (warm imports, huge pages, the fixed ``WorkerState``) and the
protocol with the service on stdin/stdout (see the package docstring)."""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import select
import signal
import struct
import sys
import tempfile
import threading
import warnings

from .calls import clean_up_after, fork_standby, run_call, unencodable
from .child import CHILD_ENV
from .heap import collapse_heap, keep_heap_in_huge_pages
from .limits import WorkerLimits
from .state import WorkerState

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
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
REHEARSAL_CALLS = 8


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
    parser.add_argument("--limits", type=WorkerLimits.from_json, default=WorkerLimits(),
                        help="the calls' limits (WorkerLimits as JSON)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ[name] = "1"  # before numpy: fork() is only safe from a single-threaded process
    os.environ["MPLBACKEND"] = "Agg"
    args = parse_args(argv)
    # The service talks on our stdin/stdout; move them out of the way of the snippets.
    control_in = os.fdopen(os.dup(0), "rb", buffering=0)  # unbuffered: `request_waiting` sees all
    control_out = os.fdopen(os.dup(1), "wb")
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
    tmp_root = "/tmp" if os.getpid() == 1 else tempfile.mkdtemp(prefix="rstar2-sandbox-")
    tmp_keep = frozenset(os.listdir(tmp_root))
    keep_heap_in_huge_pages()
    warm_up()
    gc.freeze()  # a collection in a call would touch, and so copy, every inherited object
    warm_bytes = address_space_bytes()
    call_dir = os.path.join(tmp_root, "call")
    state = WorkerState(limits=args.limits, uid=args.uid, tmp_root=tmp_root, tmp_keep=tmp_keep,
                        call_dir=call_dir, warm_bytes=warm_bytes,
                        control_fds=(control_in.fileno(), control_out.fileno()),
                        call_streams=prepare_for_calls(call_dir))
    serve_in_own_arena(state, control_in, control_out)


def prepare_for_calls(call_dir: str) -> tuple:
    """Make, once, what every call's child would otherwise build after the fork: its
    environment (the worker needs its own no longer) and its std streams (never written by
    the worker, so they are empty whenever a child is forked); returns the streams."""
    os.environ.clear()
    os.environ.update(CHILD_ENV, HOME=call_dir, TMPDIR=call_dir)
    tempfile.tempdir = None
    return (
        open(0, "r", encoding="utf-8", errors="replace", closefd=False),
        open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False),
        open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False),
    )


def serve_in_own_arena(state: WorkerState, control_in, control_out) -> None:
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
            serve(state, control_in, control_out)
        except BaseException as error:  # noqa: BLE001 -- re-raised in the main thread below
            failure.append(error)

    thread = threading.Thread(target=serve_or_record_failure, name="serve-calls")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def rehearse(state: WorkerState) -> None:
    """Run a few empty calls, then put the warm heap back into huge pages.

    The first calls write once to pages of the warm heap that no later call writes (lazy
    initialisations in the interpreter and the modules the loop uses); each such write to a
    page shared with a child splits its huge page. After them the heap is collapsed into huge
    pages again (``MADV_COLLAPSE``), which later calls then leave mostly whole.
    """
    payload = json.dumps({"code": "pass", "stdin": "", "timeout_s": 10.0}).encode()
    for _ in range(REHEARSAL_CALLS):
        _, pipes = run_call(state, fork_standby(state), json.loads(payload), payload)
        clean_up_after(state, pipes)
    collapse_heap()


def serve(state: WorkerState, control_in, control_out) -> None:
    """Answer requests until the service closes our stdin."""
    rehearse(state)
    standby = fork_standby(state)
    write_message(control_out, {"ready": True})
    while (payload := read_message(control_in)) is not None:
        request = json.loads(payload)
        refused = unencodable(request)
        if refused is not None:  # nothing to run: the standby child waits for the next call
            write_message(control_out, refused)
            continue
        outcome, pipes = run_call(state, standby or fork_standby(state), request, payload)
        write_message(control_out, outcome)
        del payload, request, outcome  # the next child is forked from this state: nothing of this call in it
        clean_up_after(state, pipes)
        # Fork ahead only when the worker would idle: a child alive while the worker works
        # makes each page the worker writes a copy-on-write fault, so under full load the
        # next child is forked on demand as before.
        standby = None if request_waiting(control_in) else fork_standby(state)


if __name__ == "__main__":
    main(sys.argv[1:])
