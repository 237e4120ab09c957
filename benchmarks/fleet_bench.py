"""One RL step of the CPU demo recipe on a fleet of two in-process engines, per scheduler.

Run (heavy, minutes; take the shared lock so no other heavy job skews the figures)::

    flock /work/bench.lock .venv/bin/python benchmarks/fleet_bench.py
    flock /work/bench.lock .venv/bin/python benchmarks/fleet_bench.py --model runs/cpu-demo/sft/final \
        --policies static,kv_aware --kv-budget-tokens 4096

For each policy, the same step -- ``recipes/cpu-demo.yaml`` with ``rollout.members`` set to two
'hf' members of one torch thread each (so each member has one of two cores) and the same
``--kv-budget-tokens`` each, same seed, same problems -- is built through the recipe
(``rstar2.rl.launch``) and run once; the script prints the step's wall time, its rollout phase,
and each member's idle share of the rollout phase (1 - the engine's own busy seconds / the
rollout wall time). The untrained base model rambles until the token budget, so rollout
lengths barely differ; pass an SFT model (a demo run's ``sft/``) for the demo's real spread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from rstar2.engines.loading import load_tokenizer
from rstar2.reward import Grader
from rstar2.rl.config import load_config
from rstar2.rl.launch import build_trainer, rollout_engine, training_problems
from rstar2.rl.policy import load_policy
from rstar2.rl.runlog import read_metrics
from rstar2.sandbox import SandboxClient, local_sandbox
from rstar2.sft.dataset import split_tasks, write_problems

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "cpu-demo.yaml"


async def one_step(config, model, tokenizer, engine, url, problems) -> list[float]:
    """Run the step; returns each member's busy seconds during it."""
    with Grader() as grader:  # one grading process per core, as the demo
        async with SandboxClient([url]) as sandbox:
            trainer = build_trainer(config, model, tokenizer, engine, sandbox, grader, problems)
            trainer.restore(resume=False)
            before = [load.busy_s for load in await engine.loads()]
            await trainer.run()
            after = [load.busy_s for load in await engine.loads()]
    return [b - a for a, b in zip(before, after)]


def measure(policy: str, args, data: Path, tmp: str, url: str) -> dict:
    member = {"threads": 1, "kv_budget_tokens": args.kv_budget_tokens}
    config = load_config(RECIPE, [f"runs_dir={tmp}", f"name=fleet-{policy}", f"data.train={data}",
                                  f"model.path={args.model}", "rl.steps=1",
                                  f"rollout.members={json.dumps([member, member])}",
                                  f"rollout.scheduler={policy}", *args.overrides])
    tokenizer = load_tokenizer(config.model.path)
    problems = training_problems(config, tokenizer)
    model = load_policy(config.model)
    engine = rollout_engine(config, model, tokenizer)
    try:
        busy = asyncio.run(one_step(config, model, tokenizer, engine, url, problems))
    finally:
        asyncio.run(engine.close())
    (row,) = read_metrics(config.run_dir)
    rollout = row["time/rollout"]
    return {"policy": policy, "step": row["time/step"], "rollout": rollout,
            "idle": [max(0.0, 1 - b / rollout) for b in busy],
            "length": row["response/length_mean"], "rollouts": config.rl.prompts_per_step
            * config.rl.rollouts_per_prompt}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="starting weights (e.g. runs/cpu-demo/sft/final)")
    parser.add_argument("--policies", default="static,kv_aware")
    parser.add_argument("--kv-budget-tokens", type=int, default=4096,
                        help="each member's KV capacity (the demo's 48 rollouts need ~370 each)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="recipe override")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        data = write_problems(Path(tmp) / "rl.jsonl", split_tasks(seed=0, sft=1, rl=200, heldout=2).rl)
        with local_sandbox(workers=2) as url:
            results = [measure(p, args, data, tmp, url) for p in args.policies.split(",")]
    print(f"\n2 members x 1 thread, KV budget {args.kv_budget_tokens} tokens each, model {args.model}")
    print(f"{'policy':<13} {'step s':>7} {'rollout s':>9} {'idle m0':>8} {'idle m1':>8} "
          f"{'rollouts':>8} {'len':>5}")
    for r in results:
        print(f"{r['policy']:<13} {r['step']:>7.1f} {r['rollout']:>9.1f} {r['idle'][0]:>8.3f} "
              f"{r['idle'][1]:>8.3f} {r['rollouts']:>8d} {r['length']:>5.0f}")


if __name__ == "__main__":
    main()
