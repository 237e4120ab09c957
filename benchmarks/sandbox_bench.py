"""Throughput and latency of the sandbox service against a naive subprocess-per-call baseline.

Run:  .venv/bin/python benchmarks/sandbox_bench.py            (about 4 minutes on 2 cores)
      .venv/bin/python benchmarks/sandbox_bench.py --seconds 3 --concurrency 1,16

Closed-loop load: C callers each send a call, wait for its answer, send the next, for a fixed
time. Workloads: ``trivial`` (print(1+1)), ``sympy`` (sympy/numpy snippets that check their
own answers), ``mix`` (80% of those, 10% infinite loops, 10% exceptions, 1 s deadline).
Every answer is checked against the outcome its snippet must have; a finished snippet
reported as failed counts as wrong. The baseline is what several peers do:
``subprocess.run([sys.executable, "-c", code], timeout=...)`` per call, C threads.
Also printed: memory of the service at rest, processes left after it stopped, and the same
load on the worker pool alone, in this process without HTTP or client (``pool`` lines): the
difference is what the HTTP service and ``SandboxClient`` cost per call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from rstar2.sandbox import SandboxClient, local_sandbox
from rstar2.sandbox.metrics import SandboxMetrics
from rstar2.sandbox.pool import PoolConfig, WorkerPool
from rstar2.sandbox.protocol import RunRequest

MIX_TIMEOUT_S = 1.0
TRIVIAL = ("print(1+1)", "ok", "2\n")
SYMPY = [
    ("import sympy as sp\nx = sp.symbols('x')\nr = sp.factor(x**4 - 1)\nassert r == (x - 1)*(x + 1)*(x**2 + 1)\nprint('ok')", "ok", "ok\n"),
    ("import sympy as sp\nassert sp.isprime(2**61 - 1) and sp.totient(10**6) == 400000\nprint('ok')", "ok", "ok\n"),
    ("import numpy as np\na = np.array([[3., 1.], [1., 2.]])\nx = np.linalg.solve(a, [9., 8.])\nassert np.allclose(x, [2., 3.])\nprint('ok')", "ok", "ok\n"),
    ("from fractions import Fraction\nimport itertools\ns = sum(Fraction(1, n) for n in range(1, 30))\nassert len(list(itertools.permutations(range(6)))) == 720\nprint('ok')", "ok", "ok\n"),
]
LOOP = ("while True:\n    pass", "timeout", None)
RAISE = ("def f(x):\n    return 1 / x\nf(0)", "error", None)


@dataclass
class Outcome:
    latencies: list[float]
    wrong: int
    seconds: float

    def summary(self) -> str:
        lat = sorted(self.latencies)
        q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000  # noqa: E731
        rate = len(lat) / self.seconds
        return f"{rate:8.1f} calls/s  p50 {q(.5):7.1f}  p95 {q(.95):7.1f}  p99 {q(.99):7.1f} ms  wrong {self.wrong}"


def pick(workload: str, rng: random.Random) -> tuple[str, str, str | None, float | None]:
    """(code, expected status, expected stdout or None, timeout) for one call."""
    if workload == "trivial":
        return (*TRIVIAL, None)
    if workload == "sympy":
        return (*rng.choice(SYMPY), None)
    roll = rng.random()
    case = LOOP if roll < 0.1 else RAISE if roll < 0.2 else rng.choice([TRIVIAL, *SYMPY])
    return (*case, MIX_TIMEOUT_S)


def is_right(status: str, stdout: str, expected_status: str, expected_stdout: str | None) -> bool:
    return status == expected_status and (expected_stdout is None or stdout == expected_stdout)


async def closed_loop(run_one, workload: str, concurrency: int, seconds: float) -> Outcome:
    """``concurrency`` callers each awaiting ``run_one(code, timeout_s)`` in turn for ``seconds``."""
    latencies, wrong = [], 0
    stop = time.monotonic() + seconds

    async def caller(seed: int) -> None:
        nonlocal wrong
        rng = random.Random(seed)
        while time.monotonic() < stop:
            code, status, stdout, timeout = pick(workload, rng)
            started = time.perf_counter()
            result = await run_one(code, timeout)
            latencies.append(time.perf_counter() - started)
            wrong += not is_right(result.status, result.stdout, status, stdout)

    started = time.monotonic()
    await asyncio.gather(*(caller(i) for i in range(concurrency)))
    return Outcome(latencies, wrong, time.monotonic() - started)


async def load_service(url: str, workload: str, concurrency: int, seconds: float) -> Outcome:
    """The closed loop through ``SandboxClient`` and the HTTP service."""
    async with SandboxClient(url, max_concurrency=concurrency) as client:
        return await closed_loop(lambda code, timeout: client.run(code, timeout_s=timeout),
                                 workload, concurrency, seconds)


async def load_pool(workers: int, workload: str, concurrency: int, seconds: float) -> Outcome:
    """The same closed loop straight into a ``WorkerPool`` of this process: no HTTP, no client."""
    pool = WorkerPool(PoolConfig(workers=workers, port=8071), SandboxMetrics())
    await pool.start()

    async def run_one(code: str, timeout: float | None):
        (result,) = await pool.run_many([RunRequest(code=code, timeout_s=timeout)])
        return result

    try:
        await pool.run_many([RunRequest(code="pass")] * workers)  # workers started and warm
        return await closed_loop(run_one, workload, concurrency, seconds)
    finally:
        await pool.close()


def naive_call(code: str, timeout: float) -> tuple[str, str]:
    """The baseline: a fresh interpreter per call."""
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    return ("ok" if done.returncode == 0 else "error"), done.stdout


def load_naive(workload: str, concurrency: int, seconds: float, default_timeout: float) -> Outcome:
    latencies, wrong = [], 0
    stop = time.monotonic() + seconds

    def caller(seed: int) -> None:
        nonlocal wrong
        rng = random.Random(seed)
        while time.monotonic() < stop:
            code, status, stdout, timeout = pick(workload, rng)
            started = time.perf_counter()
            got_status, got_stdout = naive_call(code, timeout or default_timeout)
            latencies.append(time.perf_counter() - started)
            wrong += not is_right(got_status, got_stdout, status, stdout)

    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(caller, range(concurrency)))
    return Outcome(latencies, wrong, time.monotonic() - started)


def tree_memory_mb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) in MiB of a process and all its descendants."""
    from tests.sandbox.procs import descendants

    rss = pss = 0
    for p in [pid, *descendants(pid)]:
        try:
            for line in open(f"/proc/{p}/smaps_rollup"):
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            pass
    return rss / 1024, pss / 1024


def service_processes(service: int) -> tuple[set[int], set[int]]:
    """The pids under the service (bubblewrap, workers) and the uids its calls run as."""
    from tests.sandbox.procs import descendants

    pids, uids = set(descendants(service)), set()
    for pid in pids:
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--uid" in argv:
            uids.add(int(argv[argv.index(b"--uid") + 1]))
    return pids, uids


def left_behind(pids: set[int], uids: set[int]) -> int:
    """How many of those pids, or processes running as those uids, are still alive."""
    alive = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                alive += int(entry) in pids or os.stat(f"/proc/{entry}").st_uid in uids
            except OSError:
                pass
    return alive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="duration of each closed-loop run")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--workloads", default="trivial,sympy,mix")
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1), help="as `sandbox serve`")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    workloads = args.workloads.split(",")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

    print(f"sandbox_bench: {os.cpu_count()} cores, {args.workers} workers, {args.seconds:g} s per run")
    with local_sandbox(workers=args.workers) as url:
        from tests.sandbox.procs import service_pid

        rss, pss = tree_memory_mb(service_pid(url))
        print(f"memory at rest: service + {args.workers} warm workers RSS {rss:.0f} MiB, PSS {pss:.0f} MiB")
        results = {}
        for workload in workloads:
            for c in levels:
                results[workload, c] = asyncio.run(load_service(url, workload, c, args.seconds))
                print(f"rstar2  {workload:8s} c={c:<3d} {results[workload, c].summary()}", flush=True)
        health = httpx.get(f"{url}/health").json()
        print(f"after load: workers alive {health['workers_alive']}/{health['workers']}")
        pids, uids = service_processes(service_pid(url))
    time.sleep(1.0)
    print(f"processes of the service (workers, calls) left after it stopped: {left_behind(pids, uids)}")
    for workload in workloads:
        for c in levels:
            alone = asyncio.run(load_pool(args.workers, workload, c, args.seconds))
            print(f"pool    {workload:8s} c={c:<3d} {alone.summary()}   (no HTTP, no client)", flush=True)
    if args.no_baseline:
        return
    for workload in workloads:
        for c in levels:
            naive = load_naive(workload, c, args.seconds, default_timeout=4.0)
            ours = results[workload, c]
            speedup = (len(ours.latencies) / ours.seconds) / max(1e-9, len(naive.latencies) / naive.seconds)
            print(f"naive   {workload:8s} c={c:<3d} {naive.summary()}   rstar2 is {speedup:5.1f}x", flush=True)


if __name__ == "__main__":
    main()
