"""Grading a training step's answers as its rollouts end: one worker, then one per core.

Run (heavy: take the shared lock):
    flock /work/bench.lock .venv/bin/python benchmarks/grading_step_bench.py
    ... grading_step_bench.py --answers 16384 --end-over-s 20

Data: real model outputs with their gold answers, from ../shared/data (or $RSTAR2_SHARED_DATA):
the 800 Qwen2.5-Math MATH outputs (gold in ``\\boxed{}``, so most go to the symbolic checker)
and the 2,638 ToRA GSM8K outputs, repeated to ``--answers`` (a step's 16,384 = 2,048 prompts x
8 rollouts also repeats golds and final answers within each group).

The rollouts end at uniform random times over ``--end-over-s`` seconds; each is graded as it
ends. Two set-ups, back to back on the same answers:

* ``before``: what the trainer did, ``Grader(workers=1)`` and one ``grade_many`` per rollout
  from a thread (``asyncio.to_thread``);
* ``after``: ``Grader()`` (one process per core) and ``await grader.grade(...)`` per rollout.

Printed per set-up: answers graded per second (and per core) while answers keep arriving,
the p50/p99/max wait of one answer from its rollout's end to its grade, deadline kills, and
the time grading adds after the last rollout ended (the trainer's ``reward`` timing).
Both set-ups must give the same grades (checked).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rstar2.reward import Grade, Grader  # noqa: E402
from rstar2.reward.pool import available_cores  # noqa: E402

DATA = Path(os.environ.get("RSTAR2_SHARED_DATA", REPO.parent / "shared" / "data"))


def real_answers(count: int) -> tuple[list[tuple[str, str]], int]:
    """``count`` (response, gold) pairs cycled from the real outputs; and how many are distinct."""
    def rows(relative: str) -> list[dict]:
        with (DATA / relative).open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]

    pairs = [(r["response"], f"\\boxed{{{r['answer']}}}") for r in rows("math_cot_samples/qwen25_math_cot_100x8.jsonl")]
    for name in ("tora_70b_gsm8k.jsonl", "tora_code_34b_gsm8k.jsonl"):
        pairs += [(r["response"], r["answer"]) for r in rows(f"tir_traces/{name}")]
    random.Random(0).shuffle(pairs)
    return [pairs[i % len(pairs)] for i in range(count)], len(pairs)


async def as_rollouts_end(pairs, end_times, grade_one) -> tuple[list[Grade], list[float], float, float]:
    """Grade each pair once its rollout ends; (grades, waits, wall seconds, seconds after the last end)."""
    started = time.perf_counter()
    waits = [0.0] * len(pairs)

    async def one(index: int) -> Grade:
        await asyncio.sleep(max(0.0, started + end_times[index] - time.perf_counter()))
        ended = time.perf_counter()
        grade = await grade_one(*pairs[index])
        waits[index] = time.perf_counter() - ended
        return grade

    grades = await asyncio.gather(*(one(i) for i in range(len(pairs))))
    wall = time.perf_counter() - started
    return list(grades), waits, wall, wall - max(end_times, default=0.0)


def quantile_s(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_setup(name: str, workers: int, per_rollout_thread: bool, pairs, end_times, deadline_s: float):
    with Grader(workers=workers, deadline_s=deadline_s) as grader:
        grader.compare_many([("\\frac{1}{2}", "0.5")] * workers)  # workers started and warm

        async def grade_one(response: str, gold: str) -> Grade:
            if per_rollout_thread:
                return (await asyncio.to_thread(grader.grade_many, [(response, gold)], require_answer_tag=False))[0]
            return await grader.grade(response, gold, require_answer_tag=False)

        grades, waits, wall, after_last = asyncio.run(as_rollouts_end(pairs, end_times, grade_one))
    cores = available_cores()
    rate = len(pairs) / wall
    print(f"{name:6s} workers {workers}: {rate:7.1f} answers/s ({rate / cores:6.1f} per core) over {wall:6.1f} s; "
          f"wait from rollout end p50 {quantile_s(waits, .5) * 1e3:7.1f} ms  p99 {quantile_s(waits, .99) * 1e3:8.1f} ms  "
          f"max {max(waits) * 1e3:8.1f} ms; deadline kills {sum(g.timed_out for g in grades)}; "
          f"added after the last rollout ended {after_last:6.2f} s", flush=True)
    return grades


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=16_384, help="answers in the step")
    parser.add_argument("--end-over-s", type=float, default=20.0, help="rollouts end uniformly over this (s)")
    parser.add_argument("--deadline-s", type=float, default=2.0, help="the grader's per-answer deadline")
    parser.add_argument("--workers", type=int, default=available_cores(), help="the 'after' grader's processes")
    args = parser.parse_args()
    pairs, distinct = real_answers(args.answers)
    rng = random.Random(1)
    end_times = [rng.uniform(0, args.end_over_s) for _ in pairs]
    print(f"grading_step_bench: {available_cores()} cores, {len(pairs)} answers ({distinct} distinct real outputs), "
          f"rollouts ending over {args.end_over_s:g} s, deadline {args.deadline_s:g} s")
    before = run_setup("before", 1, True, pairs, end_times, args.deadline_s)
    after = run_setup("after", args.workers, False, pairs, end_times, args.deadline_s)
    differ = sum((b.pred, b.correct) != (a.pred, a.correct) for b, a in zip(before, after) if not (a.timed_out or b.timed_out))
    print(f"correct {sum(g.correct for g in after)}/{len(after)}; grades differing between the set-ups "
          f"(deadline kills aside): {differ}")


if __name__ == "__main__":
    main()
