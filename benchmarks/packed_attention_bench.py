"""SFT step time of the two packed-attention layouts: a call per sequence, or one padded batch.

Run (heavy on a CPU: take the shared lock)::

    python benchmarks/packed_attention_bench.py --device cuda
    .venv/bin/rstar2 data sft-traces gsm8k_train --limit 110 --broken-share 0 -o /tmp/traces.jsonl
    flock /tmp/rstar2-cpu.lock .venv/bin/python benchmarks/packed_attention_bench.py --device cpu \\
        --traces /tmp/traces.jsonl --batch 16 --rounds 6 --dtype float32 --row-tokens 2048

A model of the embedded SmolLM2-135M's architecture, randomly initialised (a step's cost does not
depend on the weights), takes ``sft_step`` optimizer steps in each layout in turn, round after
round, so that load from elsewhere hits both alike; the first round is a warm-up. A step trains
``--batch`` traces packed into one row: conversations from ``--traces`` (chat JSONL, what
``rstar2 sft`` reads, asked with the short prompt), else random traces shaped like the GSM8K
recipe's (a 100-token shared opening, a question of 30-90 tokens, a response of 60-200). Prints
per layout the median, min and max seconds of a step and traces per second. On CUDA it also runs
the padded batch with cuDNN's SDPA kernels allowed (``rstar2.training.packing`` keeps them out: they
set up a graph per new shape; the call per sequence leaves the choice to SDPA).
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

import rstar2.training.packing as packing
import rstar2.sft.train as train
from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.models.loading import load_tokenizer, resolve_model_dir
from rstar2.sft.chat import conversation_sequence, read_conversations
from rstar2.sft.config import SFTSettings
from rstar2.sft.train import sft_optimizer, sft_step
from rstar2.training.batch import TrainSequence


def random_traces(rng: random.Random, count: int) -> list[TrainSequence]:
    opening = [rng.randrange(1000, 40000) for _ in range(100)]
    made = []
    for _ in range(count):
        prompt = opening + [rng.randrange(1000, 40000) for _ in range(rng.randrange(30, 90))]
        response = [rng.randrange(1000, 40000) for _ in range(rng.randrange(60, 200))]
        made.append(TrainSequence(prompt, response, [1] * len(response), [0.0] * len(response)))
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=12, help="rounds of one step per layout, the first a warm-up")
    parser.add_argument("--batch", type=int, default=32, help="traces per step")
    parser.add_argument("--traces", help="chat JSONL conversations (default: random GSM8K-shaped traces)")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--row-tokens", type=int, default=16384, help="SFTSettings.micro_batch_tokens "
                        "(the GPU recipe's; the CPU recipe's is 2048)")
    args = parser.parse_args()
    device = torch.device(args.device)
    model_dir = resolve_model_dir("default")
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir)).to(device)
    settings = SFTSettings(batch_size=args.batch, micro_batch_tokens=args.row_tokens, compute_dtype=args.dtype)
    optimizer, _ = sft_optimizer(model, settings)
    if args.traces:
        chat = ChatFormat(load_tokenizer(str(model_dir)), PromptConfig(variant="short"))
        pool = [conversation_sequence(c.messages, chat) for c in read_conversations(args.traces)]
    else:
        pool = random_traces(random.Random(0), args.batch * args.rounds)
    layouts = [("a call per sequence", False, False), ("one padded batch", True, False)]
    if device.type == "cuda":
        layouts.append(("one padded batch, cuDNN SDPA allowed", True, True))
    shipped = packing.BATCHED_BACKENDS
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
          f"torch {torch.__version__}, {args.dtype}, {args.batch} traces a step, "
          f"{'from ' + args.traces if args.traces else 'random'}", flush=True)
    times: dict[str, list[float]] = {label: [] for label, _, _ in layouts}
    for round_index in range(args.rounds):
        start = round_index * args.batch % max(len(pool) - args.batch + 1, 1)
        batch = pool[start:start + args.batch]
        for label, batched, cudnn in layouts if round_index % 2 else layouts[::-1]:
            train.packed_nll = functools.partial(packing.packed_nll, batched=batched)
            packing.BATCHED_BACKENDS = shipped + [torch.nn.attention.SDPBackend.CUDNN_ATTENTION] if cudnn else shipped
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            sft_step(model, optimizer, batch, settings)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[label].append(time.perf_counter() - started)
    for label, taken in times.items():
        timed = taken[1:] or taken
        median = statistics.median(timed)
        print(json.dumps({"layout": label, "median_s": round(median, 3), "min_s": round(min(timed), 3),
                          "max_s": round(max(timed), 3), "traces_per_s": round(args.batch / median, 2)}), flush=True)


if __name__ == "__main__":
    main()
