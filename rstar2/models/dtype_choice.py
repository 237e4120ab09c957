"""Which dtype a model computes in on this machine: the setting ``auto`` made concrete at start.

    choice = choose_dtype("train", device, ModelShapes.of("default"))
    choice.dtype, choice.reason        # 'bfloat16', 'this CPU has AVX512_BF16 (ATen AVX512, oneDNN ...)'

bfloat16 halves the bytes a matmul moves, and on CPUs with bfloat16 dot-product instructions
(AVX512_BF16, AMX_BF16) it doubles the arithmetic rate too; without them oneDNN and ATen emulate
it, and a training step in bfloat16 can be several times *slower* than in float32
(docs/benchmarks.md has both machines). So ``auto`` asks the machine, in this order:

1. **CUDA**: bfloat16 where the GPU supports it, else float32.
2. **What the CPU and torch say** (``CpuFacts``): the instruction flags in ``/proc/cpuinfo``,
   the vector ISA ATen dispatches to (``torch.backends.cpu.get_cpu_capability()``, which
   ``ATEN_CPU_CAPABILITY`` can lower) and the ISA oneDNN, which runs the matmuls, is limited
   to (``ONEDNN_MAX_CPU_ISA``). bfloat16 instructions that both may use settle it for
   bfloat16; no bfloat16 instructions, or a oneDNN held below them, settle training for
   float32 (``cpu_verdict``).
3. **A probe**, where the facts do not settle it (ATen and oneDNN disagree, a CPU that is not
   x86, and always for decoding without bfloat16 instructions, where bfloat16's halved memory
   traffic can win even when its arithmetic is emulated): the model's own matmul shapes are
   timed in both dtypes, alternately, within a time budget of about a second
   (``probe_seconds``), and bfloat16 is taken only if it is clearly faster.

Purposes: ``train`` is the forward and backward passes of an update (float32 weights, bfloat16
by autocast: ``model.compute_dtype``); ``decode`` is an engine's weights and KV cache
(``engine.dtype``, ``--dtype``), whose matmuls have as many rows as sequences decoded
together. ``choice.note`` is the one line a command prints.
"""

from __future__ import annotations

import functools
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Purpose = Literal["train", "decode"]
AUTO = "auto"
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
ONEDNN_ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
ONEDNN_WITHOUT_BF16 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
                                 "AVX512_CORE_VNNI"})
"""oneDNN ISA limits below AVX512_CORE_BF16: bfloat16 matmuls are emulated under them."""
ATEN_WITH_BF16 = frozenset({"AVX512", "AMX"})
BF16_MARGIN = 0.9
"""The probe takes bfloat16 only when it needs at most this share of float32's time: a tie is
not worth bfloat16's lost precision."""
PROBE_BUDGET_S = 1.0
TRAIN_PROBE_ROWS = 512


@dataclass(frozen=True)
class DtypeChoice:
    """A concrete dtype for ``auto`` and why it was chosen."""

    dtype: Literal["float32", "bfloat16"]
    reason: str
    probe: dict[str, float] | None = None
    """Seconds per probe pass by dtype, when a probe decided."""

    def note(self, what: str) -> str:
        return f"{what}: {self.dtype} (auto: {self.reason})"


@dataclass(frozen=True)
class CpuFacts:
    """What decides bfloat16's speed on a CPU, as torch will see it."""

    machine: str
    """``platform.machine()``: x86_64, aarch64, ..."""
    capability: str
    """``torch.backends.cpu.get_cpu_capability()``: AVX2, AVX512, DEFAULT, SVE256, ..."""
    flags: frozenset[str]
    """The CPU's instruction flags (``/proc/cpuinfo``; empty where it cannot be read)."""
    onednn_isa: str | None
    """oneDNN's ISA limit from the environment, upper-case; None when unrestricted."""

    @classmethod
    def read(cls) -> CpuFacts:
        import torch

        limit = next((os.environ[v] for v in ONEDNN_ISA_VARIABLES if os.environ.get(v)), None)
        return cls(machine=platform.machine().lower(), capability=torch.backends.cpu.get_cpu_capability(),
                   flags=cpu_flags(), onednn_isa=limit.upper() if limit else None)

    def describe(self) -> str:
        bf16 = [flag.upper() for flag in BF16_FLAGS if flag in self.flags]
        onednn = f"oneDNN up to {self.onednn_isa}" if self.onednn_isa not in (None, "ALL", "DEFAULT") else \
            "oneDNN unrestricted"
        has = f"has {'/'.join(bf16)}" if bf16 else "has no bfloat16 instructions"
        return f"this CPU {has}; ATen {self.capability}, {onednn}"


def cpu_flags(path: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The first processor's ``flags`` (x86) or ``Features`` (ARM) line, as a set."""
    try:
        text = Path(path).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_verdict(facts: CpuFacts, purpose: Purpose) -> Literal["float32", "bfloat16"] | None:
    """The dtype the facts alone settle for ``purpose``, or None when only a probe can tell."""
    x86 = facts.machine in ("x86_64", "amd64", "i686", "x86")
    if not x86:
        return None
    has_bf16 = any(flag in facts.flags for flag in BF16_FLAGS)
    onednn_bf16 = facts.onednn_isa not in ONEDNN_WITHOUT_BF16
    if has_bf16 and onednn_bf16 and facts.capability in ATEN_WITH_BF16:
        return "bfloat16"
    if purpose == "decode":
        return None
    if not has_bf16 or not onednn_bf16:
        return "float32"
    return None  # oneDNN may use bfloat16 instructions that ATen was told not to: measure


@dataclass(frozen=True)
class ModelShapes:
    """The matmul shapes of a transformer that decide its speed: an MLP projection."""

    hidden: int
    intermediate: int

    @classmethod
    def of(cls, model_spec: str) -> ModelShapes:
        """The shapes of a model spec (``default``, a .gguf file, a model directory), from its
        config alone, without loading the weights."""
        from transformers import AutoConfig

        from rstar2.models.loading import resolve_model_dir

        config = AutoConfig.from_pretrained(resolve_model_dir(model_spec))
        return cls.from_config(config)

    @classmethod
    def from_config(cls, config) -> ModelShapes:
        hidden = config.hidden_size
        return cls(hidden=hidden, intermediate=getattr(config, "intermediate_size", None) or 4 * hidden)


def choose_dtype(purpose: Purpose, device, shapes: ModelShapes, rows: int = TRAIN_PROBE_ROWS,
                 budget_s: float = PROBE_BUDGET_S, facts: CpuFacts | None = None) -> DtypeChoice:
    """The dtype ``auto`` means for ``purpose`` on ``device`` (module docstring); ``rows`` is
    how many rows a decode matmul has (sequences decoded together)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return DtypeChoice("bfloat16", "the GPU supports bfloat16")
        return DtypeChoice("float32", "the GPU does not support bfloat16")
    if device.type != "cpu":
        return DtypeChoice("float32", f"no bfloat16 rule for {device.type}")
    if facts is None:
        return machine_choice(purpose, shapes, rows, budget_s)
    return cpu_choice(facts, purpose, shapes, rows, budget_s)


@functools.lru_cache(maxsize=None)
def machine_choice(purpose: Purpose, shapes: ModelShapes, rows: int, budget_s: float) -> DtypeChoice:
    """``cpu_choice`` on this machine's facts, made once per process and question: the SFT and
    the RL phase of one run ask the same question and must get the same answer."""
    return cpu_choice(CpuFacts.read(), purpose, shapes, rows, budget_s)


def cpu_choice(facts: CpuFacts, purpose: Purpose, shapes: ModelShapes, rows: int, budget_s: float) -> DtypeChoice:
    verdict = cpu_verdict(facts, purpose)
    if verdict is not None:
        return DtypeChoice(verdict, facts.describe())
    seconds = probe_seconds(purpose, shapes, rows if purpose == "decode" else TRAIN_PROBE_ROWS, budget_s)
    faster = "bfloat16" if seconds["bfloat16"] <= BF16_MARGIN * seconds["float32"] else "float32"
    measured = ", ".join(f"{dtype} {1e3 * s:.2f} ms" for dtype, s in seconds.items())
    return DtypeChoice(faster, f"{facts.describe()}; probe of a {purpose} matmul "
                       f"{rows if purpose == 'decode' else TRAIN_PROBE_ROWS}x{shapes.hidden}x"
                       f"{shapes.intermediate}: {measured}", probe=seconds)


def probe_seconds(purpose: Purpose, shapes: ModelShapes, rows: int, budget_s: float = PROBE_BUDGET_S
                  ) -> dict[str, float]:
    """The fastest of repeated passes of ``purpose``'s work on the model's MLP shapes, per
    dtype, on the CPU. The dtypes take turns so that a burst of load from elsewhere hits both;
    the loop stops when ``budget_s`` is spent, after at least one timed pass of each, so the
    probe costs about ``budget_s`` plus one pass."""
    passes = {dtype: probe_pass(purpose, shapes, rows, dtype) for dtype in ("float32", "bfloat16")}
    best = {dtype: float("inf") for dtype in passes}
    for run in passes.values():
        run()  # warm-up: first-call allocation and kernel selection
    started = time.perf_counter()
    while True:
        for dtype, run in passes.items():
            clock = time.perf_counter()
            run()
            best[dtype] = min(best[dtype], time.perf_counter() - clock)
        if time.perf_counter() - started >= budget_s:
            return best


def probe_pass(purpose: Purpose, shapes: ModelShapes, rows: int, dtype: str) -> Callable[[], None]:
    """One pass of ``purpose``'s work in ``dtype``: an MLP up and down projection; for
    ``train`` on float32 weights, forward and backward (bfloat16 under autocast, as an update
    runs it), for ``decode`` on weights stored in ``dtype`` (as an engine holds them)."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(0)
    stored = torch.float32 if purpose == "train" else getattr(torch, dtype)

    def weight(out: int, inp: int) -> torch.Tensor:
        return (torch.randn(out, inp, generator=generator) / inp ** 0.5).to(stored)

    up, down = weight(shapes.intermediate, shapes.hidden), weight(shapes.hidden, shapes.intermediate)
    x = torch.randn(rows, shapes.hidden, generator=generator).to(stored)
    if purpose == "decode":
        def run() -> None:
            with torch.inference_mode():
                F.linear(F.linear(x, up), down)
        return run

    up.requires_grad_(True)
    down.requires_grad_(True)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")

    def run() -> None:
        with autocast:
            out = F.linear(F.linear(x, up), down)
        out.float().sum().backward()
        up.grad = down.grad = None
    return run


def resolve_dtype(setting: str, purpose: Purpose, device, shapes: ModelShapes | Callable[[], ModelShapes],
                  rows: int = TRAIN_PROBE_ROWS) -> DtypeChoice | None:
    """``choose_dtype`` when ``setting`` is ``auto``, else None (the setting stands as given);
    ``shapes`` may be a function, called only when a choice is made."""
    if setting != AUTO:
        return None
    return choose_dtype(purpose, device, shapes() if callable(shapes) else shapes, rows)
