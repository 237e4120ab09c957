"""float32 against bfloat16 on this CPU, and what ``auto`` chooses here.

Run (about a minute; take the shared lock), then again as an AVX2-only machine would run::

    flock /tmp/rstar2-cpu.lock .venv/bin/python benchmarks/dtype_bench.py
    flock /tmp/rstar2-cpu.lock env ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        .venv/bin/python benchmarks/dtype_bench.py

Prints, for the embedded SmolLM2-135M-Instruct: the seconds of a forward and backward pass
over 2 x 128 tokens (the work of an SFT or RL update) in float32 and under bfloat16 autocast,
alternated ``--runs`` times in one process; the GFLOP/s of one ``F.linear`` of the MLP's shape
(576 -> 1536) at 256 rows (an update's matmul) and at 32 rows (a decode step at batch 32) with
weights in each dtype; and the choice ``auto`` makes for training and for a 48-sequence decode,
with its reason (``rstar2.models.dtype_choice``).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from rstar2.models.dtype_choice import ModelShapes, choose_dtype
from rstar2.models.loading import load_model, set_cpu_threads


def update_seconds(model, compute_dtype: str) -> float:
    ids = torch.randint(0, model.config.vocab_size, (2, 128), generator=torch.Generator().manual_seed(0))
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=compute_dtype == "bfloat16"):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def linear_gflops(rows: int, dtype: torch.dtype, shapes: ModelShapes, seconds: float = 1.0) -> float:
    x = torch.randn(rows, shapes.hidden).to(dtype)
    w = torch.randn(shapes.intermediate, shapes.hidden).to(dtype)
    for _ in range(3):
        F.linear(x, w)
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        F.linear(x, w)
        calls += 1
    return 2 * rows * shapes.hidden * shapes.intermediate * calls / (time.perf_counter() - started) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    set_cpu_threads()
    print(f"torch {torch.__version__}, ATen {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads")
    model = load_model("default", "float32").train()
    shapes = ModelShapes.from_config(model.config)
    update_seconds(model, "float32")  # warm-up
    for run in range(args.runs):
        times = {dtype: update_seconds(model, dtype) for dtype in ("float32", "bfloat16")}
        print(f"run {run + 1}: forward + backward, 2 x 128 tokens: float32 {times['float32']:.2f} s, "
              f"bfloat16 autocast {times['bfloat16']:.2f} s")
    for rows in (256, 32):
        rates = {dtype: linear_gflops(rows, getattr(torch, dtype), shapes) for dtype in ("float32", "bfloat16")}
        print(f"F.linear {rows}x{shapes.hidden}x{shapes.intermediate}: float32 {rates['float32']:.1f} GFLOP/s, "
              f"bfloat16 {rates['bfloat16']:.1f} GFLOP/s")
    print(choose_dtype("train", "cpu", shapes).note("auto, training compute dtype"))
    print(choose_dtype("decode", "cpu", shapes, rows=48).note("auto, engine dtype at 48 sequences"))


if __name__ == "__main__":
    main()
