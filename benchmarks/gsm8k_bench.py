"""GSM8K recipe sizing: trace-builder yield and trace lengths, and SFT seconds per trace.

Run (the SFT part is heavy; take the shared lock so no other heavy job skews the figures)::

    .venv/bin/python benchmarks/gsm8k_bench.py                          # yield over all of GSM8K train
    flock /work/bench.lock .venv/bin/python benchmarks/gsm8k_bench.py --rows 400 --sft-traces 32

Builds the recipe's traces (``rstar2.tasks.gsm8k``, real agent loop and sandbox) for the first
``--rows`` rows of GSM8K train and prints how many were kept and why the rest were dropped, and
the mean prompt, response and trained (loss-mask) tokens of a trace. With ``--sft-traces N``
it then trains the embedded model on N of them with the recipe's SFT settings and prints
seconds per optimizer step and per trace, wall and CPU: the figure that sizes
``gsm8k.sft_problems`` for a time budget (the RL phase's seconds per step are in a run's
``summary.json``, or ``benchmarks/train_bench.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from rstar2.agent.prompt import PromptConfig
from rstar2.data import read_problems
from rstar2.demo.gsm8k import RECIPE, load_recipe
from rstar2.models.loading import load_tokenizer
from rstar2.sandbox import SandboxClient, local_sandbox
from rstar2.sft.train import as_sequence, resolve_sft_dtype, sft_train
from rstar2.tasks.gsm8k import gsm8k_traces
from rstar2.training.policy import load_policy


async def build(problems, tokenizer, url, broken_share):
    async with SandboxClient([url]) as sandbox:
        return await gsm8k_traces(problems, tokenizer, sandbox, PromptConfig(variant="short"), broken_share)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=0, help="first rows of GSM8K train (0: all)")
    parser.add_argument("--sft-traces", type=int, default=0, help="train on this many traces (0: skip)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="recipe override")
    args = parser.parse_args()
    settings, config = load_recipe(RECIPE, args.overrides)
    problems = read_problems(settings.train)
    problems = problems[:args.rows] if args.rows else problems
    tokenizer = load_tokenizer(config.model.path)
    started = time.perf_counter()
    with local_sandbox(workers=config.sandbox.workers) as url:
        built = asyncio.run(build(problems, tokenizer, url, settings.broken_share))
    traces = built.traces
    print(f"{len(problems)} rows: kept {len(traces)} ({len(traces) / len(problems):.1%}), "
          f"dropped {dict(built.dropped)}, {time.perf_counter() - started:.1f} s")
    print(f"tokens per trace: prompt {statistics.mean(len(t.prompt_ids) for t in traces):.0f}, "
          f"response {statistics.mean(len(t.response_ids) for t in traces):.0f}, "
          f"trained {statistics.mean(sum(t.loss_mask) for t in traces):.0f}")
    if args.sft_traces:
        model = load_policy(config.model)
        sft, note = resolve_sft_dtype(settings.sft.model_copy(update={"epochs": 1}), model)
        if note:
            print(note)
        wall, cpu = time.perf_counter(), time.process_time()
        losses = sft_train(model, [as_sequence(t) for t in traces[:args.sft_traces]], sft)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        n = min(args.sft_traces, len(traces))
        print(f"SFT: {n} traces, {len(losses)} steps of {sft.batch_size}: {wall / len(losses):.1f} s wall "
              f"({cpu / len(losses):.1f} s CPU) per step, {wall / n:.2f} s wall per trace; "
              f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")


if __name__ == "__main__":
    main()
