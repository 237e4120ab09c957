"""How long a simulated engine takes per decode step and per prefilled token, calibrated.

A decode step of ``n`` running sequences holding ``kv`` tokens of KV takes
``base_s + per_seq_s * n + per_kv_token_s * kv`` (memory-bound decoding: the weights are read
once per step, each sequence's keys and values once); prefilling costs ``prefill_per_token_s``
per token. Each profile says where its numbers come from:

* ``vllm-14b-tp2`` (the default, the paper's rollout engines: a 14B model on two H100s):
  vLLM's own published decode latency -- its performance benchmark (buildkite.com/vllm/
  performance-benchmark, build 9515 on H200, and the same suite on 8xH100:
  ``latency_llama8B_tp1``, batch 8, 32 prompt and 128 output tokens, 997.5 ms on H100, i.e.
  7.8 ms per step) -- scaled to Qwen3-14B's weights per GPU at tensor parallel 2 (7B of
  parameters per GPU against 8B, plus one all-reduce per layer), and the KV term from
  Qwen3-14B's 160 KiB of keys and values per token (40 layers x 8 KV heads x 128 x 2 x bf16)
  read at the bandwidth that benchmark implies (16 GB of weights in 7.8 ms);
* ``hf-h100``: HFEngine with SmolLM2-135M in bf16 on one H100, fitted to docs/benchmarks.md
  ("One GPU: H100": 4.2 / 5.1 / 6.7 ms per step at batch 1 / 32 / 128 around 600-token
  contexts; the context term is folded into the per-sequence one there);
* ``hf-cpu``: HFEngine with SmolLM2-135M in bf16 on the 2-core AMD EPYC of this project,
  fitted to ``python -m benchmarks.fleet_sim.steptime`` (docs/benchmarks.md, "Step-time
  calibration").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepTime:
    name: str
    base_s: float
    per_seq_s: float
    per_kv_token_s: float
    prefill_per_token_s: float
    source: str

    def decode(self, running: int, kv_tokens: int) -> float:
        return self.base_s + self.per_seq_s * running + self.per_kv_token_s * kv_tokens

    def describe(self) -> str:
        return (f"step time '{self.name}': {self.base_s * 1e3:.2f} ms + {self.per_seq_s * 1e6:.1f} us"
                f" per sequence + {self.per_kv_token_s * 1e9:.1f} ns per KV token; prefill "
                f"{self.prefill_per_token_s * 1e6:.1f} us per token ({self.source})")


PROFILES = {
    "vllm-14b-tp2": StepTime(
        "vllm-14b-tp2", base_s=0.0078 * 7 / 8 + 0.0010, per_seq_s=35e-6,
        per_kv_token_s=80e3 / 2.05e12, prefill_per_token_s=28e-6,
        source="vLLM's published Llama-3.1-8B decode latency scaled to Qwen3-14B on 2 GPUs"),
    "hf-h100": StepTime(
        "hf-h100", base_s=0.00418, per_seq_s=19.7e-6, per_kv_token_s=0.0,
        prefill_per_token_s=0.4e-6,
        source="HFEngine, SmolLM2-135M bf16, one H100: docs/benchmarks.md"),
    "hf-cpu": StepTime(
        "hf-cpu", base_s=0.0320, per_seq_s=320e-6, per_kv_token_s=16.8e-6,
        prefill_per_token_s=926e-6,
        source="HFEngine, SmolLM2-135M bf16, 2-core AMD EPYC: docs/benchmarks.md"),
}


def measure_hf(batches=(1, 4, 16), contexts=(64, 512), new_tokens=33, dtype="bfloat16") -> None:
    """Time HFEngine's decode steps on this machine and fit the profile (prints the fit).

    For each batch size and context length: the time of one prefill plus ``new_tokens`` decode
    steps, minus that of the prefill alone (``max_tokens=1``), over the steps; a least-squares
    fit of ``base + per_seq * n + per_kv * kv`` to those steps, and the prefill time per token.
    """
    import asyncio
    import time

    import numpy as np

    from rstar2.engines.base import SamplingParams
    from rstar2.engines.hf import HFEngine, HFEngineConfig

    engine = HFEngine(HFEngineConfig(dtype=dtype, max_batch_size=max(batches), max_parked=0))
    rng = np.random.default_rng(0)
    vocab = engine.model.config.vocab_size

    def timed(n: int, context: int, tokens: int) -> float:
        prompts = [rng.integers(100, vocab - 1, context).tolist() for _ in range(n)]
        params = SamplingParams(temperature=1.0, max_tokens=tokens, stop_token_ids=())
        start = time.perf_counter()
        asyncio.run(engine.generate(prompts, params))
        return time.perf_counter() - start

    timed(1, 16, 4)  # warm-up
    rows, prefill = [], []
    for n in batches:
        for context in contexts:
            first = min(timed(n, context, 1) for _ in range(2))
            whole = min(timed(n, context, new_tokens) for _ in range(2))
            step = (whole - first) / (new_tokens - 1)
            kv = n * (context + new_tokens // 2)
            rows.append((n, kv, step))
            prefill.append((n * context, first))
            print(f"batch {n:>3} context {context:>5}: {step * 1e3:7.2f} ms per step, "
                  f"prefill {first / (n * context) * 1e6:7.1f} us per token")
    engine.shutdown()
    design = np.array([[1.0, n, kv] for n, kv, _ in rows])
    (base, per_seq, per_kv), *_ = np.linalg.lstsq(design, np.array([r[2] for r in rows]), rcond=None)
    per_token = sum(t for _, t in prefill) / sum(n for n, _ in prefill)
    print(f"fit: base {base * 1e3:.2f} ms, per sequence {per_seq * 1e6:.1f} us, per KV token "
          f"{per_kv * 1e9:.1f} ns, prefill {per_token * 1e6:.1f} us per token")


if __name__ == "__main__":
    measure_hf()
