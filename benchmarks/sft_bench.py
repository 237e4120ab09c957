"""SFT throughput on GSM8K traces: traces per second of the SFT loop, on this machine.

Run (heavy, a few minutes; take the shared lock)::

    flock /tmp/rstar2-cpu.lock .venv/bin/python benchmarks/sft_bench.py
    flock /tmp/rstar2-cpu.lock .venv/bin/python benchmarks/sft_bench.py --variants plain,freeze,lora64,compile
    PYTHONPATH=/tmp/old .venv/bin/python benchmarks/sft_bench.py --train ../shared/data/gsm8k_train/gsm8k_train.jsonl

Builds traces of the first ``--traces`` GSM8K train problems with the real sandbox (the trace
format of the checkout it runs in) and trains the embedded model on them with ``SFTSettings``
(batches of 8, ``--dtype``, ``--set KEY=VALUE`` for other fields) in each variant: ``plain``,
``freeze`` (frozen embeddings, tied to the LM head), ``loraR`` (rank-R adapters on every linear
layer instead of all weights), ``compile`` (``torch.compile`` of the decoder, dynamic shapes).
The variants take turns, one optimizer step each on the same 8 traces (the next 8 each round),
for ``--rounds`` rounds, so a burst of load from elsewhere hits them alike; each variant's first
round is a warm-up. Prints tokens per trace, then per variant the median traces per second over
the rounds and the loss of each round's step. It uses only ``gsm8k_traces``, ``SFTSettings`` and ``sft_train``, so the same script
measures an older checkout (``plain`` only) for a before/after on one machine.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import time

import torch
import yaml

from rstar2.agent.prompt import PromptConfig
from rstar2.data import read_problems
from rstar2.data.benchmarks import PACKAGED_DATA_DIR
from rstar2.models.loading import load_model, load_tokenizer, set_cpu_threads
from rstar2.sandbox import SandboxClient, local_sandbox
from rstar2.sft.config import SFTSettings
from rstar2.sft.train import as_sequence, sft_train
from rstar2.tasks.gsm8k import gsm8k_traces

LINEAR_LAYERS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def build_traces(path: str, count: int, tokenizer) -> list:
    problems = read_problems(path)[:count]

    async def build(url: str):
        async with SandboxClient([url]) as sandbox:
            return await gsm8k_traces(problems, tokenizer, sandbox, PromptConfig(variant="short"), 0.0, 0)

    with local_sandbox(workers=2) as url:
        return asyncio.run(build(url)).traces


def prepared(variant: str, base: SFTSettings) -> tuple[torch.nn.Module, SFTSettings]:
    """The model and settings of one variant (module docstring)."""
    model, settings = load_model("default", "float32"), base
    if variant == "freeze":
        settings = base.model_copy(update={"freeze_embeddings": True})
    elif variant.startswith("lora"):
        from peft import LoraConfig, get_peft_model

        rank = int(variant[4:])
        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=LINEAR_LAYERS))
    elif variant == "compile":
        model.get_decoder().compile(dynamic=True)
    elif variant != "plain":
        raise SystemExit(f"unknown variant {variant!r}")
    return model, settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--variants", default="plain")
    parser.add_argument("--train", default=str(PACKAGED_DATA_DIR / "gsm8k_train.jsonl"),
                        help="GSM8K train JSONL (default: the packaged copy)")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="SFTSettings KEY=VALUE")
    args = parser.parse_args()
    set_cpu_threads()
    tokenizer = load_tokenizer("default")
    traces = build_traces(args.train, args.traces, tokenizer)
    fields = {"epochs": 1, "batch_size": 8, "lr": 1e-4, "warmup_steps": 0, "compute_dtype": args.dtype}
    fields.update({k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in args.overrides)})
    base = SFTSettings(**fields)
    tokens = sum(len(t.prompt_ids) + len(t.response_ids) for t in traces)
    print(f"{len(traces)} traces: {sum(len(t.prompt_ids) for t in traces) / len(traces):.0f} prompt + "
          f"{sum(len(t.response_ids) for t in traces) / len(traces):.0f} response tokens, "
          f"{sum(sum(t.loss_mask) for t in traces) / len(traces):.0f} trained; torch {torch.__version__}, "
          f"{torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads; {base.model_dump()}")
    parameters = inspect.signature(sft_train).parameters  # older checkouts: trajectories and a pad id
    pad = (tokenizer.pad_token_id,) if "pad_id" in parameters else ()
    items = traces if "traces" in parameters else [as_sequence(t) for t in traces]
    variants = {name: prepared(name, base) for name in args.variants.split(",")}
    rates: dict[str, list[float]] = {name: [] for name in variants}
    losses: dict[str, list[float]] = {name: [] for name in variants}
    size = base.batch_size
    for round_ in range(args.rounds + 1):
        batch = [items[(round_ * size + i) % len(items)] for i in range(size)]
        for name, (model, settings) in variants.items():
            started = time.perf_counter()
            (loss,) = sft_train(model, batch, settings, *pad)  # one optimizer step
            if round_:  # the first round warms up (allocation, compilation)
                rates[name].append(size / (time.perf_counter() - started))
                losses[name].append(loss)
    for name in variants:
        rate = statistics.median(rates[name])
        print(f"{name:>8}: {rate:.3f} traces/s ({rate * tokens / len(traces):.0f} tokens/s; rounds "
              f"{', '.join(f'{r:.3f}' for r in rates[name])}); loss by round "
              f"{', '.join(f'{x:.3f}' for x in losses[name])}")


if __name__ == "__main__":
    main()
