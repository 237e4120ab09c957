"""How often a seeded request samples the same tokens alone and in a crowd.

A request with ``SamplingParams.seed`` draws its own uniform numbers, so its tokens can change
only where its logits do: where the rows batched beside it change the kernels (padded batch
buckets, another prefill path) by a rounding error that moves a draw across a token boundary.
For each seed the request runs alone, then again while other requests decode; the figure is
how many of the seeds gave identical tokens.

    python benchmarks/seeded_sampling_bench.py --device cuda --dtypes float32 bfloat16
"""

from __future__ import annotations

import argparse
import asyncio

from rstar2.engines.base import SamplingParams
from rstar2.engines.hf import HFEngine, HFEngineConfig

QUESTIONS = ["What is 2+2?", "Name a colour.", "Write a line about the sea.", "Hi", "Count to ten."]


def chat_prompt(tokenizer, question: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


async def crowded(engine: HFEngine, crowd: list[list[int]], prompt: list[int], params: SamplingParams,
                  crowd_tokens: int) -> list[int]:
    """``prompt`` sampled with ``params`` after the crowd has started decoding."""
    others = SamplingParams(temperature=1.0, max_tokens=crowd_tokens, stop_token_ids=())
    busy = asyncio.ensure_future(engine.generate(crowd, others))
    await asyncio.sleep(0.05)
    mine = await engine.generate([prompt], params)
    await busy
    return mine[0].token_ids


def identical_share(dtype: str, args) -> int:
    engine = HFEngine(HFEngineConfig(dtype=dtype, device=args.device))
    try:
        prompts = [chat_prompt(engine.tokenizer, q) for q in QUESTIONS]
        mine, crowd = prompts[2], prompts[:2] + prompts[3:] * args.crowd_copies
        same = 0
        for seed in range(args.seeds):
            params = SamplingParams(temperature=1.0, max_tokens=args.tokens, stop_token_ids=(), seed=seed)
            alone = asyncio.run(engine.generate([mine], params))[0].token_ids
            engine.drop_caches()
            same += asyncio.run(crowded(engine, crowd, mine, params, args.tokens * 3 // 2)) == alone
        return same
    finally:
        engine.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto.")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=64, help="Tokens sampled per request.")
    parser.add_argument("--crowd-copies", type=int, default=6,
                        help="The crowd: the first two other questions once, the last two this many times.")
    args = parser.parse_args()
    for dtype in args.dtypes:
        same = identical_share(dtype, args)
        print(f"{dtype}: seeded request identical alone and in a crowd for {same} of {args.seeds} "
              f"seeds ({args.tokens} tokens each)")


if __name__ == "__main__":
    main()
