"""Two RL steps of the CPU demo recipe on two serve-model members, one of them slowed, per
scheduler: the default (``adaptive``) against ``static``, runs alternated.

Run (heavy, minutes; take the shared lock so no other heavy job skews the figures)::

    flock /tmp/rstar2-cpu.lock .venv/bin/python benchmarks/fleet_bench.py
    flock /tmp/rstar2-cpu.lock .venv/bin/python benchmarks/fleet_bench.py --model runs/cpu-demo/sft/final \\
        --runs 3 --delay-s 0.1 --policies adaptive,static

The members are two HFEngines (bf16, one torch thread each, ``--kv-budget-tokens`` each),
each behind its own serve-model app (``rstar2.serve.server.create_app``) on a real local
port, reached over HTTP as ``engine.members`` of kind ``openai``: the fleet reads their load
and decode counters from ``/metrics`` and pushes the trainer's weights through
``/update_weights_from_disk``, as with ``rstar2 serve-model`` processes. The second member's
engine pauses ``--delay-s`` in every decode step (a slower GPU, a busier host); the apps live
in this process so that pause is the only difference between the two. Each run builds the same
two steps -- ``recipes/cpu-demo.yaml``, same seed, same problems -- through the recipe
(``rstar2.run``) on a new fleet, so step 1 starts knowing nothing of the members and
step 2 with what the fleet measured in step 1 (as every later step of a run); policies take
turns run by run. Printed per run: each step's wall time and rollout phase, the trajectories
moved between members, and the tokens each member generated; then each policy's mean and
range per step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.models.loading import load_tokenizer
from rstar2.reward import Grader
from rstar2.rl.learner import LocalLearner
from rstar2.run.placement import rollout_engine
from rstar2.run.recipe import load_config
from rstar2.run.settings import learner_settings
from rstar2.run.training import build_trainer, training_problems
from rstar2.sandbox import SandboxClient, local_sandbox
from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.training.policy import load_policy
from rstar2.training.runlog import read_metrics

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "cpu-demo.yaml"


class Slowed(HFEngine):
    """A real HFEngine made slower: it pauses ``delay_s`` in every decode step (a slower GPU,
    a busier host)."""

    def __init__(self, config: HFEngineConfig, delay_s: float, **parts):
        super().__init__(config, **parts)
        decode = self.compute.decode  # the worker thread's decode step

        def slowed_decode():
            time.sleep(delay_s)
            return decode()

        self.compute.decode = slowed_decode


def start_members(args) -> tuple[list[HFEngine], list, list[str]]:
    """The two engines, each served on its own port; returns engines, servers and URLs."""
    import socket
    import threading

    import torch
    import uvicorn

    from rstar2.serve.server import create_app

    config = HFEngineConfig(model=args.model, dtype="bfloat16", kv_budget_tokens=args.kv_budget_tokens)
    engines = [HFEngine(config), Slowed(config, args.delay_s)]
    torch.set_num_threads(1)  # one core each: the engines' threads run side by side
    servers, urls = [], []
    for index, engine in enumerate(engines):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(create_app(engine, f"member{index}"),
                                               host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        servers.append(server)
        urls.append(f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 60
    while not all(s.started for s in servers):
        if time.monotonic() > deadline:
            raise SystemExit("the member servers did not start")
        time.sleep(0.05)
    return engines, servers, urls


async def one_step(config, model, tokenizer, fleet, url, problems) -> None:
    """The step, then the fleet closed in the same event loop (its HTTP clients live there)."""
    try:
        with Grader() as grader:  # one grading process per core, as the demo
            async with SandboxClient([url]) as sandbox:
                learner = LocalLearner(learner_settings(config), model, fleet)
                trainer = build_trainer(config, learner, fleet, tokenizer, sandbox, grader, problems)
                trainer.restore(resume=False)
                await trainer.run()
    finally:
        await fleet.close()


def measure(policy: str, run: int, args, data: Path, tmp: str, sandbox: str, urls, engines) -> dict:
    members = [{"kind": "openai", "base_url": url} for url in urls]
    config = load_config(RECIPE, [f"runs_dir={tmp}", f"name=fleet-{policy}-{run}",
                                  f"data.train={data}", f"model.path={args.model}", "rl.steps=2",
                                  f"engine.members={json.dumps(members)}",
                                  f"engine.scheduler={policy}", *args.overrides])
    tokenizer = load_tokenizer(config.model.path)
    problems = training_problems(config, tokenizer)
    model = load_policy(config.model)
    fleet = rollout_engine(config, model, tokenizer)
    before = [e.load().generation_tokens for e in engines]
    asyncio.run(one_step(config, model, tokenizer, fleet, sandbox, problems))
    rows = read_metrics(config.run_dir)
    return {"policy": policy, "run": run, "step": [r["time/step"] for r in rows],
            "rollout": [r["time/rollout"] for r in rows], "moves": fleet.scheduler.moves,
            "tokens": [e.load().generation_tokens - b for e, b in zip(engines, before)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="starting weights (e.g. runs/cpu-demo/sft/final)")
    parser.add_argument("--policies", default="adaptive,static")
    parser.add_argument("--runs", type=int, default=3, help="runs of each policy, alternated")
    parser.add_argument("--delay-s", type=float, default=0.1,
                        help="pause of the slowed member in every decode step")
    parser.add_argument("--kv-budget-tokens", type=int, default=4096,
                        help="each member's KV capacity (the demo's 48 rollouts need ~370 each)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="recipe override")
    args = parser.parse_args()
    policies = args.policies.split(",")
    results = []
    started = time.monotonic()
    engines, servers, urls = start_members(args)
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
            tasks = split_tasks(seed=0, sft=1, rl=200, heldout=2).rl
            data = write_problems(Path(tmp) / "rl.jsonl", tasks)
            with local_sandbox(workers=2) as sandbox:
                for run in range(args.runs):
                    for policy in policies:
                        result = measure(policy, run, args, data, tmp, sandbox, urls, engines)
                        results.append(result)
                        print(f"run {run} {policy:<13} steps {fmt(result['step'])} s, rollouts "
                              f"{fmt(result['rollout'])} s, moves {result['moves']:3d}, tokens "
                              f"{result['tokens']}", flush=True)
    finally:
        for server in servers:
            server.should_exit = True
        for engine in engines:
            engine.shutdown()
    print(f"\n2 serve-model members x 1 thread, KV budget {args.kv_budget_tokens} tokens each, "
          f"member 1 paused {args.delay_s} s per decode step, model {args.model}, "
          f"{time.monotonic() - started:.0f} s in all")
    print(f"{'policy':<13} {'step':>5} {'step s (mean, min-max)':>26} {'rollout s (mean, min-max)':>28}")
    for policy in policies:
        for step in range(2):
            steps = [r["step"][step] for r in results if r["policy"] == policy]
            rollouts = [r["rollout"][step] for r in results if r["policy"] == policy]
            print(f"{policy:<13} {step + 1:>5} {statistics.mean(steps):>9.1f} "
                  f"({min(steps):.1f}-{max(steps):.1f}){statistics.mean(rollouts):>14.1f} "
                  f"({min(rollouts):.1f}-{max(rollouts):.1f})")


def fmt(values: list[float]) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


if __name__ == "__main__":
    main()
