"""The chat example on an idle machine and beside a CPU-bound job: what sharing the cores costs,
by default (the engine's thread governor gives a core up while other processes keep it busy),
with every core's thread fixed (``OMP_NUM_THREADS``: no governor) and with ``--threads`` one fewer.

Run:  flock /tmp/rstar2-cpu.lock .venv/bin/python benchmarks/busy_bench.py
      .venv/bin/python benchmarks/busy_bench.py --model runs/cpu-demo/final --repeats 3

Each case runs ``rstar2 chat --prompt ... --temperature 0`` as a user types it, ``--repeats``
times, and reports the median wall time and its ratio to the idle machine's. The neighbour is a
Python process spinning in a loop (one core's worth of work), started before the command and
stopped after it. Greedy decoding makes every case generate the same tokens, so the times
compare the same work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

PROMPT = "What is 12345*6789?"


@contextmanager
def neighbour(busy: bool):
    """A CPU-bound process beside the command while the block runs (nothing when not ``busy``)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        time.sleep(1.0 if busy else 0.0)  # let it take its core
        yield
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def chat_seconds(model: str, max_tokens: int, threads: int | None, fixed: int | None = None) -> float:
    """The command's wall time: ``--threads`` when ``threads``; ``OMP_NUM_THREADS`` when
    ``fixed`` (the count fixed, so the engine's thread governor is off)."""
    argv = [sys.executable, "-m", "rstar2", "chat", "--model", model, "--prompt", PROMPT,
            "--temperature", "0", "--max-tokens", str(max_tokens)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if fixed is not None:
        env["OMP_NUM_THREADS"] = str(fixed)
    started = time.monotonic()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="the model chat loads (default: the embedded one)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    cases = [("idle machine, the default", False, None, None),
             ("beside a busy process, the default", True, None, None),
             (f"beside a busy process, OMP_NUM_THREADS={cores} (no governor)", True, None, cores),
             (f"beside a busy process, --threads {max(1, cores - 1)}", True, max(1, cores - 1), None)]
    print(f"busy_bench: rstar2 chat --model {args.model} --max-tokens {args.max_tokens}, {cores} cores, "
          f"median of {args.repeats}", flush=True)
    idle = None
    for name, busy, threads, fixed in cases:
        with neighbour(busy):
            times = [chat_seconds(args.model, args.max_tokens, threads, fixed) for _ in range(args.repeats)]
        median = statistics.median(times)
        idle = idle or median
        print(f"{name:45s} {median:7.1f} s  (min {min(times):.1f}, max {max(times):.1f})  "
              f"{median / idle:5.2f}x the idle machine", flush=True)


if __name__ == "__main__":
    main()
