"""A training step's burst of real tool calls through SandboxClient, against one or several services.

Run (heavy: take the shared lock):
    flock /work/bench.lock .venv/bin/python benchmarks/tool_step_bench.py
    ... tool_step_bench.py --calls 20000 --services 3 --workers 2 --kill-after-s 30
    ... tool_step_bench.py --rollouts runs/<name>/rollouts        (add a run's own tool calls)

The calls are code models wrote: the ToRA-70B and ToRA-Code-34B GSM8K programs and the ToRA
corpus ones in ../shared/data/tir_traces, rStar-math's code steps, the sympy/numpy snippets of
sandbox_bench, and with ``--rollouts`` the ``tool_calls`` of a run's ``rollouts/step_N.jsonl``.
Each distinct snippet is first run twice, alone, to learn its outcome (status and stdout);
snippets whose two runs differ (randomness, clocks) are left out and counted.

The burst: ``calls / calls-per-rollout`` rollouts start at random times over ``--ramp-s``;
each makes a few calls in turn (1 + a Poisson number, mean ``--calls-per-rollout``) with a
think time between them (exponential, mean ``--think-s``), as a policy generating between
tool calls would. All go through one SandboxClient over ``--services`` local services
(standing in for nodes). With ``--kill-after-s`` one service is SIGKILLed mid-burst: its
calls must be retried on the others, none lost, none answered twice.

Printed: calls/s and calls/s per core, latency p50/p99/max seen by the caller, outcome
counts, wrong answers (outcome or stdout differing from the snippet's own), lost calls, and
the projection to a cluster: the tool time of one step of the report's 45K calls on N nodes
of C cores at the per-core rate measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from sandbox_bench import SYMPY  # noqa: E402

from rstar2.sandbox import SandboxClient, SandboxError, local_sandbox  # noqa: E402
from tests.sandbox.procs import service_pid  # noqa: E402

DATA = Path(os.environ.get("RSTAR2_SHARED_DATA", REPO.parent / "shared" / "data"))
TORA_FILES = ("tora_70b_gsm8k.jsonl", "tora_code_34b_gsm8k.jsonl", "tora_corpus_examples.jsonl")
PAPER_CALLS_PER_STEP = 45_000
PAPER_MEAN_LATENCY_S = 0.3
CLUSTERS = ((8, 64), (8, 128), (16, 128), (64, 64))  # (nodes, cores per node) to project onto


@dataclass(frozen=True)
class Snippet:
    code: str
    source: str


@dataclass(frozen=True)
class Expected:
    status: str
    stdout: str


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    by_source: Counter = field(default_factory=Counter)
    wrong: list[tuple[str, str, str]] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    answered: Counter = field(default_factory=Counter)  # call id -> answers received


def tora_programs(path: Path) -> list[str]:
    text = [json.loads(line)["response"] for line in path.open(encoding="utf-8") if line.strip()]
    return [code for response in text for code in re.findall(r"```python\n(.*?)```", response, re.S)]


def rstar_math_programs(path: Path) -> list[str]:
    """rStar-math code steps: the text between <code> and <end_of_code>, step markers removed."""
    found = []
    for line in path.open(encoding="utf-8"):
        if line.strip():
            for code in re.findall(r"<code>(.*?)<end_of_code>", json.loads(line)["response"], re.S):
                found.append(code.replace("<end_of_step>", ""))
    return found


def rollout_programs(directory: Path) -> list[str]:
    """The code of every tool call in a run's ``rollouts/step_N.jsonl`` files."""
    return [call["code"] for path in sorted(directory.glob("*.jsonl")) for line in path.open(encoding="utf-8")
            if line.strip() for call in json.loads(line).get("tool_calls", [])]


def load_snippets(rollout_dirs: list[Path]) -> list[Snippet]:
    """Every distinct snippet of the sources (module docstring), first source wins."""
    sources: list[tuple[str, list[str]]] = [(name, tora_programs(DATA / "tir_traces" / name)) for name in TORA_FILES]
    sources.append(("rstar_math_examples", rstar_math_programs(DATA / "tir_traces" / "rstar_math_examples.jsonl")))
    sources.append(("sympy snippets", [code for code, _, _ in SYMPY]))
    sources += [(f"rollouts {d}", rollout_programs(d)) for d in rollout_dirs]
    seen: dict[str, Snippet] = {}
    for name, programs in sources:
        for code in programs:
            seen.setdefault(code, Snippet(code, name))
    return list(seen.values())


async def reference_outcomes(client: SandboxClient, snippets: list[Snippet], timeout_s: float):
    """Each snippet's outcome, from two lone runs; those whose two runs differ are dropped."""
    async def twice(snippet: Snippet):
        first = await client.run(snippet.code, timeout_s=timeout_s)
        second = await client.run(snippet.code, timeout_s=timeout_s)
        same = (first.status, first.stdout) == (second.status, second.stdout)
        return snippet, Expected(first.status, first.stdout) if same else None

    pairs = await asyncio.gather(*(twice(s) for s in snippets))
    stable = {s: e for s, e in pairs if e is not None}
    return stable, len(pairs) - len(stable)


def plan_rollouts(snippets: list[Snippet], calls: int, mean_calls: float, rng: random.Random) -> list[list[Snippet]]:
    """Rollouts of 1 + Poisson(mean - 1) calls each until ``calls`` calls; real snippets drawn
    uniformly (so each is replayed about calls / len(snippets) times)."""
    rollouts, total = [], 0
    while total < calls:
        k = min(calls - total, 1 + poisson(mean_calls - 1, rng))
        rollouts.append([rng.choice(snippets) for _ in range(k)])
        total += k
    return rollouts


def poisson(mean: float, rng: random.Random) -> int:
    limit, k, product = pow(2.718281828459045, -mean), 0, rng.random()
    while product > limit:
        k, product = k + 1, product * rng.random()
    return k


async def burst(client, rollouts, expected, args, on_kill) -> tuple[Tally, float]:
    """Play the rollouts (module docstring); returns the tally and the burst's wall seconds."""
    tally, rng = Tally(), random.Random(args.seed + 1)
    started = time.perf_counter()

    async def rollout(number: int, calls: list[Snippet], start_at: float, thinks: list[float]) -> None:
        await asyncio.sleep(start_at)
        for index, (snippet, think) in enumerate(zip(calls, thinks)):
            await asyncio.sleep(think)
            call_id = f"{number}.{index}"
            sent = time.perf_counter()
            try:
                result = await client.run(snippet.code, timeout_s=args.timeout_s)
            except SandboxError as error:
                tally.lost.append(f"{call_id}: {error}")
                continue
            tally.answered[call_id] += 1
            tally.latencies.append(time.perf_counter() - sent)
            tally.statuses[result.status] += 1
            tally.by_source[snippet.source] += 1
            want = expected[snippet]
            if (result.status, result.stdout) != (want.status, want.stdout):
                tally.wrong.append((snippet.source, f"{want.status} {want.stdout[:60]!r}",
                                    f"{result.status} {result.stdout[:60]!r} {result.stderr[-200:]!r}"))

    tasks = [rollout(n, calls, rng.uniform(0, args.ramp_s), [rng.expovariate(1 / args.think_s) for _ in calls])
             for n, calls in enumerate(rollouts)]
    killer = asyncio.create_task(on_kill()) if args.kill_after_s is not None else None
    await asyncio.gather(*tasks)
    if killer is not None:
        await killer
    return tally, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(tally: Tally, seconds: float, calls: int, dropped: int, distinct: int, killed: str | None) -> None:
    cores = os.cpu_count() or 1
    answered = sum(tally.answered.values())
    rate = answered / seconds
    lat = tally.latencies
    print(f"\ncalls {calls} from {distinct} distinct snippets ({dropped} unstable ones left out); "
          f"burst {seconds:.1f} s")
    print(f"throughput {rate:.1f} calls/s = {rate / cores:.1f} calls/s per core ({cores} cores)")
    print(f"latency seen by the caller: mean {sum(lat) / max(1, len(lat)):.3f} s  p50 {percentile(lat, .5):.3f} s  "
          f"p99 {percentile(lat, .99):.3f} s  max {max(lat, default=float('nan')):.3f} s")
    print("outcomes: " + "  ".join(f"{k} {v}" for k, v in sorted(tally.statuses.items())))
    print("by source: " + "  ".join(f"{k} {v}" for k, v in sorted(tally.by_source.items())))
    twice = sum(1 for n in tally.answered.values() if n > 1)
    print(f"wrong {len(tally.wrong)}  lost {len(tally.lost)}  answered twice {twice}  "
          f"answered {answered}/{calls}" + (f"  (killed mid-burst: {killed})" if killed else ""))
    for source, want, got in tally.wrong[:5]:
        print(f"  wrong [{source}]: expected {want}, got {got}")
    for line in tally.lost[:5]:
        print(f"  lost {line}")
    print(f"\nprojection: the report's {PAPER_CALLS_PER_STEP} calls per step (answered at {PAPER_MEAN_LATENCY_S} s "
          f"mean latency there) at {rate / cores:.1f} calls/s per core:")
    for nodes, per_node in CLUSTERS:
        busy = PAPER_CALLS_PER_STEP / (rate / cores * nodes * per_node)
        print(f"  {nodes:3d} nodes x {per_node:3d} cores: {busy:6.1f} s of tool time per step")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="tool calls in the burst")
    parser.add_argument("--services", type=int, default=3, help="local services, standing in for nodes")
    parser.add_argument("--workers", type=int, default=2, help="warm workers per service")
    parser.add_argument("--calls-per-rollout", type=float, default=2.7, help="mean tool calls per rollout")
    parser.add_argument("--think-s", type=float, default=1.0, help="mean think time before each call (s)")
    parser.add_argument("--ramp-s", type=float, default=20.0, help="rollouts start uniformly over this (s)")
    parser.add_argument("--timeout-s", type=float, default=10.0, help="deadline of every call (s)")
    parser.add_argument("--kill-after-s", type=float, default=30.0,
                        help="SIGKILL the first service this long into the burst; negative: never")
    parser.add_argument("--rollouts", type=Path, action="append", default=[],
                        help="a run's rollouts/ folder whose tool calls to replay too (repeatable)")
    parser.add_argument("--snippets", type=int, default=None,
                        help="replay only this many distinct snippets, sampled (a quick look)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.kill_after_s is not None and args.kill_after_s < 0:
        args.kill_after_s = None
    if args.kill_after_s is not None and args.services < 2:
        parser.error("--kill-after-s needs --services 2 or more (the calls go to the others)")
    for directory in args.rollouts:
        if not directory.is_dir():
            parser.error(f"--rollouts {directory}: not a directory")
    return args


async def run_bench(urls: list[str], args: argparse.Namespace) -> None:
    snippets = load_snippets(args.rollouts)
    if args.snippets is not None:
        snippets = random.Random(args.seed).sample(snippets, min(args.snippets, len(snippets)))
    print(f"{len(snippets)} distinct snippets; learning their outcomes (two lone runs each)", flush=True)
    async with SandboxClient(urls) as client:
        expected, dropped = await reference_outcomes(client, snippets, args.timeout_s)
    print("reference outcomes: " + "  ".join(f"{k} {v}" for k, v in
                                             sorted(Counter(e.status for e in expected.values()).items())))
    rollouts = plan_rollouts(list(expected), args.calls, args.calls_per_rollout, random.Random(args.seed))
    victim = service_pid(urls[0]) if args.kill_after_s is not None else None

    async def kill() -> None:
        await asyncio.sleep(args.kill_after_s)
        os.kill(victim, signal.SIGKILL)
        print(f"killed service {urls[0]} (pid {victim}) at {args.kill_after_s:g} s", flush=True)

    print(f"burst: {len(rollouts)} rollouts, {args.calls} calls, {len(urls)} services x {args.workers} workers",
          flush=True)
    async with SandboxClient(urls) as client:
        tally, seconds = await burst(client, rollouts, expected, args, kill)
    report(tally, seconds, args.calls, dropped, len(expected), urls[0] if victim else None)


def main() -> None:
    args = parse_args()
    print(f"tool_step_bench: {os.cpu_count()} cores, {args.services} services x {args.workers} workers")
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(local_sandbox(workers=args.workers, timeout_s=args.timeout_s))
                for _ in range(args.services)]
        asyncio.run(run_bench(urls, args))


if __name__ == "__main__":
    main()
