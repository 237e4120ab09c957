"""CPU time and page faults per call of the sandbox workers, split into worker and call children.

Run:  .venv/bin/python benchmarks/sandbox_cpu_bench.py
      .venv/bin/python benchmarks/sandbox_cpu_bench.py --worker-package /tmp/old/worker   (compare)

Drives a ``WorkerPool`` in this process (real bubblewrap workers, no HTTP) with a closed loop of
trivial calls and reads, from ``/proc/PID/stat`` of each worker, its own CPU time and minor
faults and those of its reaped children (the calls), over the loop; also the worker heap left
in transparent huge pages (``AnonHugePages``) at the end. Page-fault counts do not depend on
what else runs on the machine, so a change can be judged on a busy one; CPU times do, a little:
compare two workers in one run (``--worker-package``, a folder named ``worker``, e.g. from
``git archive REV rstar2/sandbox/worker | tar -x -C /tmp/old --strip-components=2``) rather than
across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from rstar2.sandbox import isolation  # noqa: E402
from rstar2.sandbox.local import free_port  # noqa: E402
from rstar2.sandbox.metrics import SandboxMetrics  # noqa: E402
from rstar2.sandbox.pool import PoolConfig, WorkerPool  # noqa: E402
from rstar2.sandbox.protocol import RunRequest  # noqa: E402
from tests.sandbox.procs import workers_below  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def counters(pids: list[int]) -> list[int]:
    """Summed over the workers: own CPU ticks, children's CPU ticks, own faults, children's faults."""
    total = [0, 0, 0, 0]
    for pid in pids:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total[0] += int(f[11]) + int(f[12])
        total[1] += int(f[13]) + int(f[14])
        total[2] += int(f[7])
        total[3] += int(f[8])
    return total


def huge_page_mb(pids: list[int]) -> float:
    kb = 0
    for pid in pids:
        for line in open(f"/proc/{pid}/smaps_rollup"):
            if line.startswith("AnonHugePages:"):
                kb += int(line.split()[1])
    return kb / 1024 / max(1, len(pids))


async def measure(args: argparse.Namespace) -> None:
    pool = WorkerPool(PoolConfig(workers=args.workers, port=free_port()), SandboxMetrics())
    await pool.start()
    await pool.run_many([RunRequest(code="pass")] * args.workers)
    pids = workers_below(os.getpid())
    done = 0

    async def caller(calls: int) -> None:
        nonlocal done
        while done < calls:
            done += 1
            (result,) = await pool.run_many([RunRequest(code=args.code)])
            assert result.status == "ok", result

    async def closed_loop(calls: int) -> None:
        nonlocal done
        done = 0
        await asyncio.gather(*(caller(calls) for _ in range(args.concurrency)))

    try:
        await closed_loop(args.warm_calls)
        for _ in range(args.rounds):
            before = counters(pids)
            await closed_loop(args.calls)
            own, children, own_faults, child_faults = (b - a for a, b in zip(before, counters(pids)))
            print(f"{args.calls} calls c={args.concurrency}: CPU per call worker {own / TICKS / done * 1000:.2f} ms"
                  f" + children {children / TICKS / done * 1000:.2f} ms; page faults per call worker"
                  f" {own_faults / done:.0f} + children {child_faults / done:.0f};"
                  f" heap in huge pages {huge_page_mb(pids):.0f} MB per worker", flush=True)
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1), help="as `sandbox serve`")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--calls", type=int, default=1500, help="calls per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm-calls", type=int, default=100, help="calls before the first round, not counted")
    parser.add_argument("--code", default="print(1+1)")
    parser.add_argument("--worker-package", type=Path, default=None,
                        help="run this worker package (a folder named worker) instead of the "
                             "installed one (to compare two versions)")
    args = parser.parse_args()
    if args.worker_package is not None:
        isolation.WORKER_PACKAGE = args.worker_package.resolve()
    print(f"sandbox_cpu_bench: {args.workers} workers, worker {isolation.WORKER_PACKAGE}")
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
