"""Seconds per step of the distributed CPU run beside the single-process one, and weight-sync
seconds per push.

Run (heavy, several minutes; take the shared lock so no other heavy job skews the figures)::

    flock /work/bench.lock .venv/bin/python benchmarks/distributed_bench.py --steps 3

Steps: ``recipes/cpu-cluster.yaml`` (2 FSDP2 gloo learner ranks, 2 Ray engine actors, one
sandbox, broadcast sync) and the same recipe without its ``cluster:`` section (one process,
a bf16 engine copy), same seed, problems and sizes, each ``--steps`` steps; every group is kept
(``roc.drop_zero_variance=false``) so every step runs a real update even when the untrained
model solves nothing. Printed per mode: the mean of ``time/step`` and ``time/update`` (learn and
weight push) over the steps after the first (which includes warm-up).

Sync: a 2-rank learner and 2 Ray actor members, ``--pushes`` timed pushes of each method
('broadcast' from rank 0 over the members' gloo group, 'gather' through the driver).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from rstar2.run.recipe import load_config
from rstar2.run.settings import cluster_job, learner_settings
from rstar2.run.training import train
from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.training.runlog import read_metrics

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "cpu-cluster.yaml"
SIZES = ["rl.prompts_per_step=2", "rl.group_size=2", "rollout.max_response_tokens=48",
         "rollout.max_turns=2", "rl.roc.drop_zero_variance=false"]


def step_seconds(tmp: Path, data: Path, steps: int, distributed: bool) -> dict[str, float]:
    overrides = [*SIZES, f"runs_dir={tmp}", f"data.train={data}", f"rl.steps={steps}",
                 f"name={'cluster' if distributed else 'single'}"]
    if not distributed:
        overrides.append("cluster=null")
    config = load_config(RECIPE, overrides)
    train(config)
    rows = read_metrics(config.run_dir)[1:] or read_metrics(config.run_dir)
    return {key: statistics.mean(r[f"time/{key}"] for r in rows) for key in ("step", "update")}


def sync_seconds(pushes: int) -> dict[str, float]:
    import ray

    from rstar2.cluster.learner import DistributedLearner
    from rstar2.cluster.weight_sync import GatherSync
    from rstar2.fleet.rollout_engine import MemberSpec, open_fleet
    from rstar2.models.loading import load_tokenizer

    config = load_config(RECIPE, ["data.train=unused.jsonl"])
    tokenizer = load_tokenizer("default")
    if not ray.is_initialized():  # the distributed steps above started one
        ray.init(num_cpus=config.cluster.cpus_per_node, include_dashboard=False, log_to_driver=False)
    fleet = open_fleet([MemberSpec(ray=True)] * 2, "static", model="default", dtype="float32",
                       seed=0, tokenizer=tokenizer)
    learner = DistributedLearner(cluster_job(config), learner_settings(config), fleet)
    try:
        asyncio.run(learner.push_weights())  # opens the broadcast group
        broadcast = [asyncio.run(learner.sync.push()) for _ in range(pushes)]
        print(f"sync broadcast: {statistics.median(broadcast):.2f} s per push", flush=True)
        gather = [asyncio.run(GatherSync(learner, fleet).push()) for _ in range(pushes)]
    finally:
        learner.close()
        asyncio.run(fleet.close())
        ray.shutdown()
    return {"broadcast": statistics.median(broadcast), "gather": statistics.median(gather)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--pushes", type=int, default=5)
    parser.add_argument("--sync-only", action="store_true", help="only the sync figures")
    args = parser.parse_args()
    if args.sync_only:
        args.steps = 0
    with tempfile.TemporaryDirectory(prefix="distributed-bench-") as tmp:
        data = write_problems(Path(tmp) / "rl.jsonl", split_tasks(seed=0, sft=1, rl=1, heldout=40).heldout)
        for distributed in (False, True) if args.steps else ():
            seconds = step_seconds(Path(tmp), data, args.steps, distributed)
            mode = "distributed (2 ranks, 2 actors)" if distributed else "single process"
            print(f"{mode}: {seconds['step']:.1f} s per step, update+push {seconds['update']:.1f} s")
    seconds = sync_seconds(args.pushes)
    print(f"sync gather: {seconds['gather']:.2f} s per push (SmolLM2-135M, float32, 2 members)")


if __name__ == "__main__":
    main()
