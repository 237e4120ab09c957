"""The embedded engine's decode step, prefill and GRPO update beside their floor, in one run.

Run (heavy, a few minutes; take the shared lock)::

    flock /tmp/rstar2-cpu.lock .venv/bin/python benchmarks/decode_floor_bench.py
    flock /tmp/rstar2-cpu.lock env ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        .venv/bin/python benchmarks/decode_floor_bench.py --dtype float32    # an AVX2-only CPU

The floor is what the hardware needs for the work, measured here in the same run:

* a decode step of ``n`` rows: the model's matmuls at batch ``n`` in plain PyTorch (the fused
  query/key/value and gate/up projections, the output and down projections of every layer and
  the LM head), plus reading the rows' cached keys and values once at the memory bandwidth a
  large streaming read reaches (``bandwidth``);
* a prefill of ``t`` tokens: the same matmuls at batch ``t``;
* an update over ``t`` tokens: three times the forward matmuls (forward, and the backward's
  two products per weight) in the update's compute dtype.

The engine's figures: the median decode step (its ``Compute.decode``, timed around the call)
after ``n`` distinct random prompts of ``context`` tokens are prefilled, with the fused kernels
and, with ``--compare``, with the model's own forward pass; the prefill's seconds per token
(the step that admits the prompts);
``policy_update`` on random sequences of the CPU demo's shape. Prints one table per part, the
ratios last.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

from rstar2.engines.base import SamplingParams
from rstar2.engines.hf import HFEngine, HFEngineConfig


def machine() -> str:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                     if line.startswith("Model name"))
        flags = next(line for line in lscpu.splitlines() if line.startswith("Flags"))
        isa = [f for f in ("avx512_bf16", "amx_bf16") if f in flags.split()] or ["avx2 only"]
    except (OSError, StopIteration):
        model, isa = platform.processor() or "unknown CPU", []
    return (f"{model}, {torch.get_num_threads()} threads, {'+'.join(isa)}; torch {torch.__version__} "
            f"(CPU capability {torch.backends.cpu.get_cpu_capability()})")


def timed(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bandwidth() -> float:
    """Bytes per second of a streaming read of 1 GiB (a float32 sum)."""
    x = torch.ones(1 << 28)
    return x.numel() * 4 / timed(x.sum)


class Floor:
    """Plain-PyTorch matmuls of the model's shapes, in ``dtype``."""

    def __init__(self, config, dtype):
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        hidden, inter = config.hidden_size, config.intermediate_size
        shapes = [((heads + 2 * kv_heads) * head_dim, hidden), (hidden, heads * head_dim),
                  (2 * inter, hidden), (hidden, inter)]
        # every layer its own weights, as in the model: one set reused would stay in cache
        self.weights = [[torch.randn(shape).to(dtype) for shape in shapes]
                        for _ in range(config.num_hidden_layers)]
        self.head = torch.randn(config.vocab_size, hidden).to(dtype)
        self.dtype = dtype
        self.kv_bytes = 2 * config.num_hidden_layers * kv_heads * head_dim * self.head.element_size()

    def matmuls(self, tokens: int) -> float:
        inputs = [torch.randn(tokens, w.shape[1]).to(self.dtype) for w in self.weights[0]]

        def forward():
            for layer in self.weights:
                for x, w in zip(inputs, layer):
                    F.linear(x, w)
            F.linear(inputs[0][:, : self.head.shape[1]], self.head)

        return timed(forward, repeats=3)


def decode_steps(engine: HFEngine, batch: int, context: int, new_tokens: int) -> tuple[float, float]:
    """(median decode step, prefill seconds per token) for ``batch`` random prompts. The
    prefill is the step that admits the prompts: their forward pass and one decode step, or,
    for prompts of at most ``FUSED_PREFILL`` tokens, one pass of the fused kernels."""
    steps, admissions = [], []
    decode, step = engine.compute.decode, engine.step

    def timed_decode():
        start = time.perf_counter()
        out = decode()
        steps.append(time.perf_counter() - start)
        return out

    def timed_step(admitted):
        start = time.perf_counter()
        step(admitted)
        if admitted:
            admissions.append(time.perf_counter() - start)

    engine.compute.decode, engine.step = timed_decode, timed_step
    try:
        g = torch.Generator().manual_seed(batch * 7919 + context)
        vocab = engine.model.config.vocab_size
        prompts = torch.randint(100, vocab - 1, (batch, context), generator=g).tolist()
        params = SamplingParams(temperature=1.0, max_tokens=new_tokens, stop_token_ids=())
        asyncio.run(engine.generate(prompts, params))
    finally:
        engine.compute.decode, engine.step = decode, step
        engine.drop_caches()
    return statistics.median(steps[1:]), sum(admissions) / (batch * context)


def random_rollouts(count: int, length: int) -> list:
    """``count`` seeded random rollouts of ``length`` tokens as the update takes them: half
    prompt, half trained response, a sampled log-prob of -1 a token, advantages -1 and +1 in turn."""
    from rstar2.training.batch import TrainSequence

    generator = torch.Generator().manual_seed(0)
    half = length // 2
    return [TrainSequence(torch.randint(100, 40000, (half,), generator=generator).tolist(),
                          torch.randint(100, 40000, (half,), generator=generator).tolist(), [1] * half,
                          [-1.0] * half, 1.0 if index % 2 else -1.0) for index in range(count)]


def update_time(dtype: str, sequences: int, length: int) -> tuple[float, int]:
    """Seconds of one ``policy_update`` over ``sequences`` random rollouts of ``length`` tokens
    (half prompt, half response), at the CPU demo's micro-batches; and the tokens it covers."""
    from rstar2.models.loading import load_model
    from rstar2.rl.config import LossConfig
    from rstar2.rl.update import UpdateSettings, policy_update
    from rstar2.training.config import OptimizerConfig
    from rstar2.training.optim import build_optimizer, build_scheduler

    model = load_model("default", "float32")
    batch = random_rollouts(sequences, length)
    schedule = OptimizerConfig(lr=1e-6, warmup_steps=0)
    optimizer = build_optimizer(model.parameters(), schedule)
    scheduler = build_scheduler(optimizer, schedule)
    settings = UpdateSettings(loss=LossConfig(), temperature=1.0, micro_batch_tokens=2048,
                              max_grad_norm=1.0, compute_dtype=dtype)
    seconds = timed(lambda: policy_update(model, optimizer, scheduler, batch, settings, None), repeats=2)
    return seconds, sequences * length


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"),
                        help="the engine's dtype (rstar2 picks bfloat16 where the CPU has bf16 instructions)")
    parser.add_argument("--batches", default="1,16,48,128")
    parser.add_argument("--contexts", default="128,512,1024")
    parser.add_argument("--new-tokens", type=int, default=17)
    parser.add_argument("--compare", action="store_true", help="also the model's own forward pass")
    parser.add_argument("--skip-update", action="store_true")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    dtype = getattr(torch, args.dtype)
    print(f"machine: {machine()}")
    fused = HFEngine(HFEngineConfig(dtype=args.dtype, max_batch_size=max(batches), max_parked=0))
    print(f"engine: SmolLM2-135M-Instruct, {args.dtype}, decode: {fused.compute.decode_path}")
    engines = {"fused": fused}
    if args.compare:
        engines["forward"] = HFEngine(HFEngineConfig(dtype=args.dtype, max_batch_size=max(batches),
                                                     max_parked=0, decode_kernels=False),
                                      model=fused.model, tokenizer=fused.tokenizer)
    read = bandwidth()
    floor = Floor(fused.model.config, dtype)
    print(f"memory read bandwidth: {read / 1e9:.1f} GB/s; KV per cached token: {floor.kv_bytes / 1e3:.1f} KB\n")
    print("| batch | context | floor: matmuls + KV read | " + " | ".join(f"{name} step | ratio" for name in engines)
          + " | prefill per token (fused) |")
    print("|---|---|---|" + "---|---|" * len(engines) + "---|")
    for batch in batches:
        matmuls = floor.matmuls(batch)
        for context in contexts:
            kv = batch * (context + args.new_tokens // 2) * floor.kv_bytes / read
            cells, prefill = [], None
            for name, engine in engines.items():
                step, per_token = decode_steps(engine, batch, context, args.new_tokens)
                prefill = prefill or per_token
                cells.append(f"{step * 1e3:.1f} ms | **{step / (matmuls + kv):.2f}×**")
            print(f"| {batch} | {context} | {matmuls * 1e3:.1f} + {kv * 1e3:.1f} = {(matmuls + kv) * 1e3:.1f} ms | "
                  + " | ".join(cells) + f" | {prefill * 1e6:.0f} µs |", flush=True)
    tokens = 4096
    prefill_floor = floor.matmuls(tokens) / tokens
    _, per_token = decode_steps(fused, 8, 512, 3)
    print(f"\nprefill: {per_token * 1e6:.0f} µs per token (8 prompts of 512); floor "
          f"{prefill_floor * 1e6:.0f} µs (matmuls over {tokens} tokens): {per_token / prefill_floor:.2f}×")
    for engine in engines.values():
        engine.shutdown()
    if not args.skip_update:
        for update_dtype in ("bfloat16", "float32"):
            seconds, covered = update_time(update_dtype, sequences=24, length=320)
            update_floor = 3 * Floor(fused.model.config, getattr(torch, update_dtype)).matmuls(covered)
            print(f"update ({update_dtype} compute): {seconds:.2f} s for {covered} tokens; floor "
                  f"{update_floor:.2f} s (3x forward matmuls): {seconds / update_floor:.2f}×")


if __name__ == "__main__":
    main()
