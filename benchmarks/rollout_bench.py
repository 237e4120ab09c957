"""Generation and rollout throughput on this machine: HFEngine beside plain ``model.generate``.

Run (heavy, a few minutes; take the shared lock so no other heavy job skews the figures)::

    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/rollout_bench.py
    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/rollout_bench.py \
        --batch-sizes 32 --dtypes bfloat16 --new-tokens 256 --rollouts 32
    .venv/bin/python benchmarks/rollout_bench.py --device cuda --skip-rollouts   # one GPU

Part 1, tokens/s end to end (prefill included) at each batch size and dtype: B different
questions in the paper's prompt (~450 tokens, the system prompt shared), 256 new tokens each
(end of turn ignored so every row generates exactly that many), sampled at temperature 1:

* ``generate``: ``model.generate`` on a left-padded batch (SDPA attention, dynamic cache);
* ``HFEngine``: a fresh engine (nothing cached) fed the same token ids concurrently.

Both run on ``--device`` (on CUDA: batches 1, 32 and 128 by default, the engine's flat
attention with CUDA graphs; graphs are captured by an untimed warm-up pass at each size).
Each is timed ``--repeats`` times (default 1 on the CPU, 3 on a GPU, where ``generate``'s own
timings vary from run to run), and the minimum and median seconds are printed; the speed-up
is best against best, and ``ms/step`` is the engine's best time divided by the new tokens.

Part 2, rollouts/s of a tool-using batch: the agent loop on HFEngine with a local sandbox.
The base model rarely calls the tool on its own, so each rollout's first turn is scripted:
a Python tool call ending the turn (mask 0). The sandbox runs every call and the model writes
the following turns (up to the response budget), so generation, tool calls and resumed
sequences interleave as in training.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import time

import torch

from rstar2.agent.prompt import ChatFormat
from rstar2.engines.base import SamplingParams
from rstar2.models.device import device_note, resolve_device
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.models.loading import load_model, load_tokenizer, set_cpu_threads

QUESTIONS = [
    f"Let n = {a}. What is the sum of the digits of n^{b} plus {c}?"
    for a, b, c in zip(range(12, 100, 3), range(3, 40), range(100, 140))
]
SCRIPTED_TURN = (
    "I will compute it with Python.\n<tool_call>\n"
    '{{"name": "execute_python_code_with_standard_io", "arguments": '
    '{{"code": "n = {n}\\nprint(sum(int(d) for d in str(n ** 7)))", "input": ""}}}}\n'
    "</tool_call><|im_end|>"
)


def questions(count: int) -> list[str]:
    return [QUESTIONS[i % len(QUESTIONS)] + " " * (i // len(QUESTIONS)) for i in range(count)]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_generate(model, tokenizer, prompts: list[list[int]], new_tokens: int) -> float:
    """Seconds for ``model.generate`` on the batch (left padded), exactly ``new_tokens`` each."""
    width = max(map(len, prompts))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    synchronize(model.device)
    start = time.perf_counter()
    with torch.inference_mode():
        model.generate(ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                       top_k=0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       pad_token_id=pad)
    synchronize(model.device)
    return time.perf_counter() - start


def engine_generate(engine: HFEngine, prompts: list[list[int]], new_tokens: int) -> float:
    """Seconds for a fresh ``HFEngine`` to complete the batch (all submitted at once)."""
    engine.drop_caches()
    params = SamplingParams(temperature=1.0, max_tokens=new_tokens, stop_token_ids=())
    start = time.perf_counter()
    outs = asyncio.run(engine.generate(prompts, params))
    elapsed = time.perf_counter() - start
    assert all(len(o.token_ids) == new_tokens for o in outs)
    return elapsed


def timed(run, repeats: int) -> tuple[float, float]:
    """Minimum and median seconds of ``repeats`` calls of ``run``."""
    seconds = sorted(run() for _ in range(repeats))
    return seconds[0], statistics.median(seconds)


def bench_generation(args) -> None:
    tokenizer = load_tokenizer(args.model)
    chat = ChatFormat(tokenizer)
    device = resolve_device(args.device)
    print(f"{device_note(args.device)}, prompt tokens: {len(chat.prompt_ids(QUESTIONS[0]))}, "
          f"threads: {torch.get_num_threads()}, new tokens: {args.new_tokens}, repeats: {args.repeats}")
    print(f"{'dtype':9} {'batch':>5} {'generate s min/med':>19} {'tok/s':>7} "
          f"{'HFEngine s min/med':>19} {'tok/s':>7} {'speed-up':>8} {'ms/step':>7}")
    for dtype in args.dtypes:
        model = load_model(args.model, dtype, device)
        engine = HFEngine(HFEngineConfig(model=args.model, dtype=dtype, device=str(device),
                                         max_batch_size=max(args.batch_sizes)))
        warm = [chat.prompt_ids(QUESTIONS[0])]
        plain_generate(model, tokenizer, warm, 4)
        engine_generate(engine, warm, 4)
        for batch in args.batch_sizes:
            prompts = [chat.prompt_ids(q) for q in questions(batch)]
            tokens = batch * args.new_tokens
            if device.type == "cuda":  # capture this size's graphs outside the timings
                engine_generate(engine, prompts, args.new_tokens)
            plain, plain_median = timed(lambda: plain_generate(model, tokenizer, prompts, args.new_tokens),
                                        args.repeats)
            ours, ours_median = timed(lambda: engine_generate(engine, prompts, args.new_tokens),
                                      args.repeats)
            print(f"{dtype:9} {batch:5d} {plain:9.2f}/{plain_median:<9.2f} {tokens / plain:7.1f} "
                  f"{ours:9.2f}/{ours_median:<9.2f} {tokens / ours:7.1f} {plain / ours:7.2f}x "
                  f"{1000 * ours / args.new_tokens:7.1f}", flush=True)
        engine.shutdown()
        del model


def bench_rollouts(args) -> None:
    """Rollouts/s of a batch whose every rollout calls the tool at least once."""
    from rstar2.agent.rollout import Agent, RolloutConfig
    from rstar2.sandbox import SandboxClient, local_sandbox

    engine = HFEngine(HFEngineConfig(model=args.model, dtype=args.dtypes[-1], device=args.device,
                                     max_batch_size=args.rollouts))
    config = RolloutConfig(temperature=1.0, max_turns=4, max_response_tokens=args.new_tokens)

    async def run(url):
        async with SandboxClient(url) as client:
            agent = Agent(engine, engine.tokenizer, client, config)
            jobs = [agent.rollout(q, SCRIPTED_TURN.format(n=12 + i))
                    for i, q in enumerate(questions(args.rollouts))]
            return await asyncio.gather(*jobs)

    with local_sandbox(workers=2) as url:
        start = time.perf_counter()
        trajectories = asyncio.run(run(url))
        elapsed = time.perf_counter() - start
    engine.shutdown()
    calls = [c for t in trajectories for c in t.tool_calls]
    sampled = sum(sum(t.loss_mask) for t in trajectories)
    stops = collections.Counter(t.stop_reason for t in trajectories)
    print(f"\nrollouts with tools ({args.dtypes[-1]}, {args.rollouts} rollouts, budget "
          f"{args.new_tokens} tokens): {elapsed:.1f} s, {len(trajectories) / elapsed:.2f} "
          f"rollouts/s, {sampled / elapsed:.1f} sampled tok/s")
    print(f"  tool calls: {len(calls)} ({sum(c.error for c in calls)} errors), mean sandbox "
          f"time {sum(c.duration_s for c in calls) / max(len(calls), 1) * 1000:.0f} ms; "
          f"stop reasons: {dict(stops)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto.")
    parser.add_argument("--batch-sizes", type=int, nargs="+",
                        help="Default: 1 8 32 on the CPU, 1 32 128 on a GPU.")
    parser.add_argument("--repeats", type=int, help="Timings per measurement (min and median "
                        "are printed). Default: 1 on the CPU, 3 on a GPU.")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--rollouts", type=int, default=32, help="Batch of tool rollouts.")
    parser.add_argument("--skip-generation", action="store_true")
    parser.add_argument("--skip-rollouts", action="store_true")
    args = parser.parse_args()
    on_gpu = resolve_device(args.device).type == "cuda"
    args.batch_sizes = args.batch_sizes or ([1, 32, 128] if on_gpu else [1, 8, 32])
    args.repeats = args.repeats or (3 if on_gpu else 1)
    set_cpu_threads()
    if not args.skip_generation:
        bench_generation(args)
    if not args.skip_rollouts:
        bench_rollouts(args)


if __name__ == "__main__":
    main()
