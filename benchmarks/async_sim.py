"""Synchronous against asynchronous training at the paper's scale, on the simulated fleet.

    python benchmarks/async_sim.py                        # the paper's setting and a straggler (minutes)
    python benchmarks/async_sim.py --engines 8 --prompts 64 --steps 4     # the same, smaller

The fleet, its scheduler (``--policy``, the fleet's own) and the engines are those of
``benchmarks/scheduler_sim.py``; the learner's side is ``benchmarks/fleet_sim/pipeline.py``:
each configuration trains ``--steps`` batches of the same trajectories, synchronously (k = 0)
and asynchronously with staleness bounds k = 1, 2, 4. The update takes ``--update-share`` of a
synchronous step (rollouts about 70% of it: RollPacker), measured as a share of the synchronous
run's mean batch makespan in the same run, and a push pauses the engines for ``--push-s``.
Scenarios: ``paper`` (64 engines, 512 prompts x 32 rollouts, KV for 1024 tokens per
trajectory dealt to an engine) and ``straggler`` (the same with one engine decoding 2x slower).
Prints trajectories trained per hour (and its ratio to synchronous), engine and learner idle
shares and the staleness of the trained batches; simulated seconds, independent of the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.fleet_sim.driver import Fleet, longest_context  # noqa: E402
from benchmarks.fleet_sim.pipeline import LearnerProfile, PipelineSimulation  # noqa: E402
from benchmarks.fleet_sim.steptime import PROFILES  # noqa: E402
from benchmarks.fleet_sim.workload import Workload  # noqa: E402

SCENARIOS = {"paper": {}, "straggler": {"slow_engines": 1}}
BOUNDS = (0, 1, 2, 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--rollouts-per-prompt", type=int, default=32)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steptime", choices=sorted(PROFILES), default="vllm-14b-tp2")
    parser.add_argument("--policy", default="adaptive")
    parser.add_argument("--update-share", type=float, default=0.3,
                        help="the update's share of a synchronous step (rollouts the rest)")
    parser.add_argument("--push-s", type=float, default=7.0)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    workload = Workload(prompts=args.prompts, rollouts_per_prompt=args.rollouts_per_prompt, seed=args.seed)
    per_engine = args.prompts * args.rollouts_per_prompt // args.engines
    print(f"{args.engines} engines, {args.prompts} prompts x {args.rollouts_per_prompt} rollouts, "
          f"{args.steps} batches, policy {args.policy}, seed {args.seed}; {PROFILES[args.steptime].describe()}")
    for name in args.scenario or SCENARIOS:
        capacity = max(1024 * per_engine, longest_context(workload))  # one trajectory fits alone
        fleet = dataclasses.replace(Fleet(engines=args.engines, kv_capacity_tokens=capacity),
                                    **SCENARIOS[name])
        started = time.monotonic()
        # the synchronous run without an update measures the rollout makespan the update is sized by
        probe = simulation(fleet, workload, args).run_pipeline(args.steps, LearnerProfile(0.0, 0.0), 0)
        rollout_s = probe.wall_s / args.steps
        learner = LearnerProfile(update_s=rollout_s * args.update_share / (1 - args.update_share),
                                 push_s=args.push_s)
        print(f"\n{name}: mean synchronous rollout phase {rollout_s:.0f} s; update {learner.update_s:.0f} s, "
              f"push {learner.push_s:.0f} s")
        print("| mode | trajectories / hour | vs sync | engine idle | learner idle | staleness mean / max |")
        print("|---|---|---|---|---|---|")
        base = None
        for k in BOUNDS:
            result = simulation(fleet, workload, args).run_pipeline(args.steps, learner, k)
            base = base or result.per_hour
            print(f"| {result.mode} | {result.per_hour:,.0f} | {result.per_hour / base:.2f}x | "
                  f"{result.engine_idle_share:.0%} | {result.learner_idle_share:.0%} | "
                  f"{result.staleness_mean:.2f} / {result.staleness_max} |", flush=True)
        print(f"({time.monotonic() - started:.0f} s)")


def simulation(fleet: Fleet, workload: Workload, args) -> PipelineSimulation:
    return PipelineSimulation(fleet, workload, PROFILES[args.steptime], args.policy)


if __name__ == "__main__":
    main()
