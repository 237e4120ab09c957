"""Seconds per GRPO update (forward, backward, optimizer step) of a fixed batch, on this machine.

Run (heavy, a few minutes; take the shared lock)::

    .venv/bin/rstar2 data sft-traces gsm8k_train --limit 110 --broken-share 0 -o /tmp/traces.jsonl
    flock /tmp/rstar2-cpu.lock .venv/bin/python benchmarks/update_bench.py --traces /tmp/traces.jsonl
    git archive COMMIT rstar2 | tar -x -C /tmp/old    # the same on an older checkout
    flock /tmp/rstar2-cpu.lock env PYTHONPATH=/tmp/old .venv/bin/python benchmarks/update_bench.py --traces /tmp/traces.jsonl

The conversations of ``--traces`` (chat JSONL, asked with the short prompt as the CPU recipes
ask) stand in for kept rollouts: their tool responses are masked as the agent masks them, each
gets a made-up sampled log-prob of -1 per trained token and an advantage of +1 or -1 in turn.
The embedded model takes ``--rounds`` updates (``policy_update``, the learner's, at the CPU
demo's micro-batches of 4,096 tokens) of ``--batch`` of them, the next ones each round (the CPU
demo keeps 6 prompts x 4 rollouts = 24 a step); the first is a warm-up. Prints the median,
min and max seconds of an update and the tokens it covered. It uses only ``UpdateSettings`` and
``policy_update``, so the same script measures an older checkout for a before/after.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.models.loading import load_model, load_tokenizer
from rstar2.rl.config import LossConfig
from rstar2.rl.update import UpdateSettings, policy_update
from rstar2.sft.chat import conversation_sequence, read_conversations
from rstar2.training.batch import TrainSequence
from rstar2.training.config import OptimizerConfig
from rstar2.training.optim import build_optimizer, build_scheduler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", required=True, help="chat JSONL conversations (rstar2 data sft-traces)")
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="compute dtype")
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    args = parser.parse_args()
    tokenizer = load_tokenizer("default")
    chat = ChatFormat(tokenizer, PromptConfig(variant="short"))
    pool = []
    for index, conversation in enumerate(read_conversations(args.traces)):
        s = conversation_sequence(conversation.messages, chat)
        pool.append(TrainSequence(s.prompt_ids, s.response_ids, s.loss_mask,
                                  [-1.0 if m else 0.0 for m in s.loss_mask], 1.0 if index % 2 else -1.0))
    model = load_model("default", "float32")
    schedule = OptimizerConfig(lr=1e-6, warmup_steps=0)
    optimizer = build_optimizer(model.parameters(), schedule)
    scheduler = build_scheduler(optimizer, schedule)
    fields = {"loss": LossConfig(), "temperature": 1.0, "micro_batch_tokens": args.micro_batch_tokens,
              "max_grad_norm": 1.0, "compute_dtype": args.dtype}
    if "pad_id" in {f.name for f in dataclasses.fields(UpdateSettings)}:  # an older checkout's
        fields["pad_id"] = tokenizer.pad_token_id
    settings = UpdateSettings(**fields)
    times, tokens = [], []
    for round_index in range(args.rounds):
        start = round_index * args.batch % max(len(pool) - args.batch + 1, 1)
        batch = pool[start:start + args.batch]
        started = time.perf_counter()
        policy_update(model, optimizer, scheduler, batch, settings)
        times.append(time.perf_counter() - started)
        tokens.append(sum(map(len, batch)))
    timed = times[1:] or times
    print(json.dumps({"dtype": args.dtype, "sequences": args.batch, "tokens_per_update": round(statistics.mean(tokens)),
                      "median_s": round(statistics.median(timed), 2), "min_s": round(min(timed), 2),
                      "max_s": round(max(timed), 2), "rounds_s": [round(t, 2) for t in times]}), flush=True)


if __name__ == "__main__":
    main()
