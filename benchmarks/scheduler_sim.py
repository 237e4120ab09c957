"""The fleet's scheduling policies on simulated engines, over a suite of scenarios.

    python benchmarks/scheduler_sim.py                   # the suite at the paper's scale (minutes)
    python benchmarks/scheduler_sim.py --engines 8 --prompts 64        # the same, smaller
    python benchmarks/scheduler_sim.py --scenario tight-vllm --steps 2  # one row

The policies are the fleet's own (``rstar2.fleet.scheduler.Scheduler``, called as
``fleet.Fleet`` calls it: ``benchmarks/fleet_sim/driver.py``); only the engines are simulated
(``benchmarks/fleet_sim/engine.py``: SGLang's and vLLM v1's admission and overflow rules, a
prefix cache, the decode step time of ``benchmarks/fleet_sim/steptime.py``). Each scenario
runs ``--steps`` rollout steps back to back with one scheduler, so what a policy learns in a
step (lengths, member speeds, fill targets) serves the next ones, as in a training run; each
cell prints every step's makespan ("step 1 / step 2 / ...", simulated seconds, independent of
the machine running this).

The suite (KV per engine is given per trajectory dealt to an engine, so a smaller run keeps
the paper's pressure: 1024 tokens x 512 trajectories = the paper's 512K):

* ``ample-*``: 1024 KV tokens per trajectory (nothing has to wait for KV);
* ``tight-*``: 512 per trajectory (the paper's 256K per engine);
* ``*-sglang``, ``*-vllm``: the engine's overflow model; ``tight-evict-half``: the stress case
  (half the running requests evicted at once on overflow; no engine does this);
* ``heavy-tail``: log-normal spreads 0.9 (between prompts) and 0.8 (within one);
* ``slow-tools``: tool calls of 2 s median with spread 1.2 on 4 sandbox workers per engine;
* ``straggler``: one engine decodes 2x slower; ``straggler-tight``: the same with tight KV;
* ``small-batch``: 1/8 of the prompts, 8 rollouts each.

Columns: each policy's makespans; ``adaptive/best``: the largest, over the steps, of
adaptive's makespan over the best simple policy's (static or least_loaded) in the same step;
``static/adaptive``: the speed-up over static once something has been learnt (the makespans of
steps 2 to ``--steps`` added up; of the one step with ``--steps 1``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.fleet_sim.driver import Fleet, Simulation, longest_context  # noqa: E402
from benchmarks.fleet_sim.steptime import PROFILES  # noqa: E402
from benchmarks.fleet_sim.workload import Workload  # noqa: E402
from rstar2.fleet.scheduler import POLICIES  # noqa: E402

AMPLE, TIGHT = 1024, 512  # KV tokens per trajectory dealt to an engine

SCENARIOS = {
    "ample-sglang": ({"overflow": "sglang"}, {}, AMPLE),
    "ample-vllm": ({"overflow": "vllm"}, {}, AMPLE),
    "tight-sglang": ({"overflow": "sglang"}, {}, TIGHT),
    "tight-vllm": ({"overflow": "vllm"}, {}, TIGHT),
    "tight-evict-half": ({"overflow": "evict_half"}, {}, TIGHT),
    "heavy-tail": ({"overflow": "sglang"}, {"group_sigma": 0.9, "rollout_sigma": 0.8}, AMPLE),
    "slow-tools": ({"overflow": "sglang"}, {"tool_median_s": 2.0, "tool_sigma": 1.2,
                                            "tool_timeout_s": 30.0, "tool_workers": 4}, AMPLE),
    "straggler": ({"overflow": "sglang", "slow_engines": 1}, {}, AMPLE),
    "straggler-tight": ({"overflow": "vllm", "slow_engines": 1}, {}, TIGHT),
    "small-batch": ({"overflow": "sglang"}, {"prompts": -8, "rollouts_per_prompt": 8}, AMPLE),
}
SIMPLE = ("static", "least_loaded")


def scenario(name: str, args: argparse.Namespace) -> tuple[Fleet, Workload]:
    fleet_changes, workload_changes, kv_per_trajectory = SCENARIOS[name]
    workload_changes = dict(workload_changes)
    prompts = args.prompts // -workload_changes.pop("prompts", -1)
    workload = dataclasses.replace(
        Workload(prompts=prompts, rollouts_per_prompt=args.rollouts_per_prompt, seed=args.seed),
        **workload_changes)
    if "tool_workers" in workload_changes:
        workload.tool_workers *= args.engines
    per_engine = args.prompts * args.rollouts_per_prompt // args.engines
    capacity = max(kv_per_trajectory * per_engine, longest_context(workload))  # one fits alone
    fleet = Fleet(engines=args.engines, kv_capacity_tokens=capacity,
                  steps=args.steps, **fleet_changes)
    return fleet, workload


def run_row(name: str, args: argparse.Namespace, policies: list[str]) -> dict[str, list]:
    fleet, workload = scenario(name, args)
    return {policy: Simulation(fleet, workload, PROFILES[args.steptime], policy).run()
            for policy in policies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--rollouts-per-prompt", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steptime", choices=sorted(PROFILES), default="vllm-14b-tp2")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="run only these rows (repeatable)")
    parser.add_argument("--policies", default=",".join(POLICIES))
    args = parser.parse_args()
    policies = args.policies.split(",")
    print(f"{args.engines} engines, {args.prompts} prompts x {args.rollouts_per_prompt} "
          f"rollouts, 8K response budget, prompt 600 tokens, {args.steps} steps, seed {args.seed}")
    print(PROFILES[args.steptime].describe())
    width = max(15, 8 * args.steps) + 2
    header = f"{'scenario':<17}" + "".join(f"{p:>{width}}" for p in policies)
    if "adaptive" in policies:
        header += f"{'adaptive/best':>15}{'static/adaptive':>17}"
    print(header)
    for name in args.scenario or SCENARIOS:
        started = time.monotonic()
        results = run_row(name, args, policies)
        cells = "".join(f"{' / '.join(f'{r.makespan_s:.1f}' for r in results[p]):>{width}}"
                        for p in policies)
        line = f"{name:<17}{cells}"
        if "adaptive" in policies and all(p in results for p in SIMPLE):
            ratio = max(results["adaptive"][i].makespan_s
                        / min(results[p][i].makespan_s for p in SIMPLE)
                        for i in range(args.steps))
            later = slice(1, None) if args.steps > 1 else slice(None)
            speedup = (sum(r.makespan_s for r in results["static"][later])
                       / sum(r.makespan_s for r in results["adaptive"][later]))
            line += f"{ratio:>15.3f}{speedup:>16.2f}x"
        print(f"{line}   ({time.monotonic() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
