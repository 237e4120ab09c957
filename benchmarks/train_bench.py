"""Seconds per GRPO-RoC step on this machine, split by phase, at the CPU demo's settings.

Run (heavy, a few minutes; take the shared lock so no other heavy job skews the figures)::

    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/train_bench.py
    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/train_bench.py \
        --model runs/cpu-demo/sft/final --steps 3 --set rl.prompts_per_step=8

Trains ``--steps`` real steps of ``recipes/cpu-demo.yaml`` (real model, sandbox and verifier)
on the demo's RL problems into a temporary run folder and prints, per step and on average:
``rollout`` (generation and tool calls, overlapped), ``tools`` (wall time with at least one call
in flight, inside rollout), ``reward`` (grading left after the last rollout ended), ``update``
(old log-prob recomputation, forward/backward, optimizer, weight push) and the whole step.
The untrained base model rambles until the token budget, so pass an SFT model (a demo run's
``sft/``) for rollouts of the demo's real lengths.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rstar2.run.recipe import load_config
from rstar2.run.training import train
from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.training.runlog import read_metrics

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "cpu-demo.yaml"
PHASES = ("rollout", "tools", "reward", "update", "step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="starting weights (e.g. runs/cpu-demo/sft/final)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="recipe override")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="train-bench-") as tmp:
        data = write_problems(Path(tmp) / "rl.jsonl", split_tasks(seed=0, sft=1, rl=200, heldout=2).rl)
        config = load_config(RECIPE, [f"runs_dir={tmp}", f"data.train={data}", f"model.path={args.model}",
                                      f"rl.steps={args.steps}", "checkpoint.keep_last=1", *args.overrides])
        train(config)
        rows = read_metrics(config.run_dir)
    rl = config.rl
    print(f"\n{rl.prompts_per_step} prompts x {rl.rollouts_per_prompt} rollouts, G={rl.group_size}, "
          f"max {config.rollout.max_response_tokens} tokens, model {args.model}")
    print("step  " + "  ".join(f"{p:>8}" for p in PHASES) + "   tokens  len")
    for row in rows:
        print(f"{row['step']:>4}  " + "  ".join(f"{row[f'time/{p}']:8.1f}" for p in PHASES)
              + f"  {row.get('loss/tokens', 0):7.0f}  {row['response/length_mean']:4.0f}")
    mean = {p: sum(row[f"time/{p}"] for row in rows) / len(rows) for p in PHASES}
    print("mean  " + "  ".join(f"{mean[p]:8.1f}" for p in PHASES))


if __name__ == "__main__":
    main()
