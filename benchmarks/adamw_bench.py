"""AdamW's step on the embedded policy, fused kernel against PyTorch's default, and the whole RL
update with each, alternating in one process (so both see the same machine at the same time).

Run (heavy, a few minutes; take the shared lock)::

    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/adamw_bench.py

The policy is the embedded SmolLM2-135M-Instruct in float32 (its 135M parameters and their two
moments are what a step passes over). The optimizer step alone is timed with random gradients in
place; the update is ``policy_update`` over ``--sequences`` random rollouts of ``--length``
tokens (half prompt, half trained), bfloat16 compute, micro-batches of 2,048 tokens and
checkpointed layers, as the CPU demo runs it. ``build_optimizer`` picks the fused kernel; the
default is ``torch.optim.AdamW`` with the same settings. Prints one JSON line per case.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.decode_floor_bench import random_rollouts  # noqa: E402
from rstar2.models.loading import load_model  # noqa: E402
from rstar2.rl.config import LossConfig  # noqa: E402
from rstar2.rl.update import UpdateSettings, policy_update  # noqa: E402
from rstar2.training.config import OptimizerConfig  # noqa: E402
from rstar2.training.optim import build_optimizer, build_scheduler  # noqa: E402
from rstar2.training.policy import checkpoint_activations  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=24)
    parser.add_argument("--length", type=int, default=320)
    parser.add_argument("--rounds", type=int, default=4, help="updates per optimizer (the first a warm-up)")
    args = parser.parse_args()
    model = load_model("default", "float32")
    checkpoint_activations(model)
    params = [p for p in model.parameters() if p.requires_grad]
    config = OptimizerConfig(lr=1e-7, warmup_steps=0)  # tiny: the rounds barely move the weights
    optimizers = {
        "fused": build_optimizer(params, config),
        "default": torch.optim.AdamW(params, lr=config.lr, betas=config.betas, eps=config.eps,
                                     weight_decay=config.weight_decay),
    }
    if not optimizers["fused"].param_groups[0]["fused"]:
        raise SystemExit("build_optimizer did not pick the fused kernel on this machine")

    for param in params:
        param.grad = torch.randn_like(param) * 1e-3
    for name, optimizer in optimizers.items():
        times = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            optimizer.step()
            times.append(time.perf_counter() - started)
        print(json.dumps({"case": f"AdamW step, {name}", "parameters": sum(p.numel() for p in params),
                          "median_s": round(statistics.median(times[1:]), 3),
                          "rounds_s": [round(t, 3) for t in times]}), flush=True)

    settings = UpdateSettings(loss=LossConfig(), temperature=1.0, micro_batch_tokens=2048, max_grad_norm=1.0,
                              compute_dtype="bfloat16")
    batch = random_rollouts(args.sequences, args.length)
    update_times: dict[str, list[float]] = {name: [] for name in optimizers}
    for _ in range(args.rounds):
        for name, optimizer in optimizers.items():
            scheduler = build_scheduler(optimizer, config)
            started = time.perf_counter()
            policy_update(model, optimizer, scheduler, batch, settings, old_from_forward=True)
            update_times[name].append(time.perf_counter() - started)
    for name, times in update_times.items():
        print(json.dumps({"case": f"update, {name}", "sequences": args.sequences,
                          "tokens": args.sequences * args.length, "median_s": round(statistics.median(times[1:]), 2),
                          "rounds_s": [round(t, 2) for t in times]}), flush=True)


if __name__ == "__main__":
    main()
