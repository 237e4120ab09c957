"""The demo's held-out evaluation at several concurrencies: seconds, and prompt tokens prefilled.

Run (heavy, a few minutes; take the shared lock), on a finished demo's folder::

    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/heldout_concurrency_bench.py \\
        --run runs/cpu-demo --model runs/cpu-demo/sft/final
    # the GSM8K recipe's engine (8 prompts x 2G = 8 rollouts) on 300 GSM8K test problems
    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/heldout_concurrency_bench.py \\
        --run runs/cpu-demo --model runs/cpu-demo/sft/final --gsm8k 300 --set rl.group_size=4

Each concurrency is one ``Evaluator`` run, as the demo and the GSM8K recipe evaluate: the run's
``config.yaml`` (its engine, prompt and sandbox; ``--set`` changes the RL batch the engine is
sized for), ``--model`` loaded as the policy, greedy answers to the run's ``data/heldout.jsonl``
(or the first ``--gsm8k`` GSM8K test problems) with ``concurrency`` answers in flight, ``all``
being every problem at once. Counted around ``HFEngine.place``: the prompt tokens the engine
computes, which grow when an answer's next turn finds its parked keys evicted. The engine's
batch (``rollout_batch_size``) is what the demo now uses.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import yaml
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks.decode_floor_bench import machine  # noqa: E402
from rstar2.data.benchmarks import load_benchmark  # noqa: E402
from rstar2.data.jsonl import write_jsonl  # noqa: E402
from rstar2.demo.pipeline import DemoSettings, Evaluator  # noqa: E402
from rstar2.engines.hf.engine import HFEngine  # noqa: E402
from rstar2.models.loading import load_tokenizer  # noqa: E402
from rstar2.recipe import apply_override  # noqa: E402
from rstar2.reward import Grader  # noqa: E402
from rstar2.run.config import RunConfig  # noqa: E402
from rstar2.run.placement import rollout_batch_size, rollout_engine  # noqa: E402
from rstar2.sandbox import SandboxClient, local_sandbox  # noqa: E402
from rstar2.training.policy import load_policy  # noqa: E402


class PrefillCounter:
    """Prompt tokens the engine computes (``HFEngine.place``'s new tokens), counted in place."""

    def __init__(self):
        self.tokens = 0
        self.place = HFEngine.place
        counter = self

        def counting(engine, requests):
            placed = counter.place(engine, requests)
            counter.tokens += sum(len(r.pending) for r in placed.reps)
            return placed

        HFEngine.place = counting


async def evaluate(config: RunConfig, model, tokenizer, heldout: Path, concurrency: int, url: str,
                   grader: Grader, out: Path) -> tuple[float, float, int]:
    """Seconds, accuracy and tokens generated of one held-out evaluation, on an engine of its
    own (nothing cached from the one before)."""
    engine = rollout_engine(config, model, tokenizer)
    try:
        async with SandboxClient([url]) as sandbox:
            evaluator = Evaluator(DemoSettings(), engine, tokenizer, sandbox, grader, config.rollout.prompt,
                                  heldout, out, Console(quiet=True), concurrency=concurrency)
            started = time.perf_counter()
            phase = await evaluator("bench", model)
            return time.perf_counter() - started, phase.accuracy, engine.load().generation_tokens
    finally:
        await engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, type=Path, help="a finished demo's folder")
    parser.add_argument("--model", required=True, help="the model to evaluate (e.g. RUN/sft/final)")
    parser.add_argument("--concurrency", default="all,batch", help="comma-separated: numbers, "
                        "'all' (every problem at once), 'batch' (the engine's batch)")
    parser.add_argument("--gsm8k", type=int, default=0, help="evaluate on this many GSM8K test "
                        "problems instead of the run's held-out set")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change the run's config (e.g. rl.group_size=4)")
    args = parser.parse_args()
    raw = yaml.safe_load((args.run / "config.yaml").read_text())
    raw["model"]["path"] = args.model
    for override in args.set:
        apply_override(raw, override)
    config = RunConfig(**raw)
    work = Path(tempfile.mkdtemp(prefix="heldout-bench-"))
    heldout = args.run / "data" / "heldout.jsonl"
    if args.gsm8k:
        heldout = work / "gsm8k.jsonl"
        write_jsonl(heldout, (dict(p.row, id=p.id) for p in load_benchmark("gsm8k").problems[:args.gsm8k]))
    problems = len(load_benchmark(str(heldout)).problems)
    batch = rollout_batch_size(config)
    print(f"machine: {machine()}; {problems} problems, engine batch {batch}")
    tokenizer = load_tokenizer(config.model.path)
    model = load_policy(config.model)  # the evaluations push its weights; none changes them
    counter = PrefillCounter()
    print("| concurrency | seconds | prompt tokens computed | tokens generated | accuracy |")
    print("|---|---:|---:|---:|---:|")
    with local_sandbox(workers=config.sandbox.workers, timeout_s=config.rollout.tool_timeout_s) as url, \
            Grader() as grader:
        for index, name in enumerate(args.concurrency.split(",")):
            concurrency = {"all": problems, "batch": batch}.get(name) or int(name)
            counter.tokens = 0
            seconds, accuracy, generated = asyncio.run(
                evaluate(config, model, tokenizer, heldout, concurrency, url, grader, work / f"eval-{index}"))
            print(f"| {name} ({concurrency}) | {seconds:.1f} | {counter.tokens} | {generated} | "
                  f"{100 * accuracy:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
