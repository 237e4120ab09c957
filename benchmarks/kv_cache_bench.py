"""The embedded engine's KV memory: the slot cache mapped once as address space (what the engine
does on Linux) against the cache grown by reallocating and copying (what it falls back to), on
one batch of rollouts, each in a fresh process so that peak memory is its own.

Run (heavy, a few minutes; take the shared lock)::

    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/kv_cache_bench.py

One batch as the CPU demo's RL step samples it: ``--rollouts`` sequences (128: 8 prompts x 16)
decoded together by the embedded SmolLM2-135M-Instruct in bfloat16, each a shared 64-token
prefix (the system prompt, a shared block) and 100 tokens of its own, then a seeded number of
new tokens (log-normal, median 140, at most 256: the demo's response lengths), the end token
ignored so every length is what was drawn. Prints one JSON line per process and mode -- wall
time of the batch, peak RSS of the process, and its RSS after the model loaded -- and the KV
floor: the keys and values of every token the batch held, the shared prefix once.
Modes alternate, ``--rounds`` times each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

MODES = ("mapped", "grown")


def rss_gb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 1e9


def lengths(count: int, seed: int, median: int = 140, cap: int = 256) -> list[int]:
    draw = random.Random(seed)
    return [max(1, min(cap, round(draw.lognormvariate(0, 0.5) * median))) for _ in range(count)]


def one_batch(mode: str, rollouts: int, seed: int) -> dict:
    """The batch in this process, with the cache ``mode`` asks for."""
    from rstar2.engines import slots
    from rstar2.engines.base import SamplingParams
    from rstar2.engines.hf import HFEngine, HFEngineConfig

    if mode == "grown":
        slots.RESERVE_LIMIT = 0  # no mapping: the growth path the engine falls back to
    engine = HFEngine(HFEngineConfig(dtype="bfloat16", max_batch_size=rollouts))
    loaded = rss_gb()
    draw = random.Random(seed)
    vocab = engine.model.config.vocab_size
    shared = [draw.randrange(1000, vocab) for _ in range(64)]
    prompts = [shared + [draw.randrange(1000, vocab) for _ in range(100)] for _ in range(rollouts)]
    new_tokens = lengths(rollouts, seed)

    async def batch() -> None:
        await asyncio.gather(*(
            engine.generate([p], SamplingParams(max_tokens=n, temperature=1.0, stop_token_ids=[]))
            for p, n in zip(prompts, new_tokens)))

    started = time.perf_counter()
    asyncio.run(batch())
    wall = time.perf_counter() - started
    cache = engine.table.cache
    per_token = 2 * cache.k[:, 0, :, 0].numel() * cache.k.element_size()  # keys and values
    # every slot holds its own 100 tokens and what it generated; the shared prefix is held once
    held = len(shared) + sum(100 + n for n in new_tokens)
    engine.shutdown()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    return {"mode": mode, "wall_s": round(wall, 2), "peak_rss_gb": round(peak, 3),
            "rss_after_load_gb": round(loaded, 3), "kv_tokens": held,
            "kv_floor_gb": round(held * per_token / 1e9, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=MODES, help="run one batch in this process (internal)")
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(one_batch(args.mode, args.rollouts, args.seed)), flush=True)
        return
    for _ in range(args.rounds):
        for mode in MODES:
            subprocess.run([sys.executable, __file__, "--mode", mode, "--rollouts", str(args.rollouts),
                            "--seed", str(args.seed)], check=True)


if __name__ == "__main__":
    main()
