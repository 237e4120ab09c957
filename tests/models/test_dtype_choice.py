"""``auto`` dtypes: what the CPU's facts settle (forced capability strings and oneDNN limits give
the expected choice), when a probe decides instead, and that the probe keeps to its budget."""

import time

import pytest
import torch

from rstar2.models.dtype_choice import (
    CpuFacts,
    ModelShapes,
    choose_dtype,
    cpu_flags,
    cpu_verdict,
    probe_seconds,
)

ZEN4 = frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_vnni"})
SAPPHIRE_RAPIDS = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
ZEN2 = frozenset({"avx2", "fma"})
SKYLAKE_X = frozenset({"avx2", "avx512f", "avx512bw"})
TINY = ModelShapes(hidden=64, intermediate=128)


def facts(capability: str, flags: frozenset, onednn: str | None = None, machine: str = "x86_64") -> CpuFacts:
    return CpuFacts(machine=machine, capability=capability, flags=flags, onednn_isa=onednn)


@pytest.mark.parametrize("cpu, train, decode", [
    (facts("AVX512", ZEN4), "bfloat16", "bfloat16"),
    (facts("AVX512", SAPPHIRE_RAPIDS, "AVX512_CORE_AMX"), "bfloat16", "bfloat16"),
    (facts("AVX2", ZEN2), "float32", None),                          # no bf16 instructions
    (facts("AVX512", SKYLAKE_X), "float32", None),                   # AVX-512 without bf16
    (facts("AVX2", ZEN4, "AVX2"), "float32", None),                  # ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
    (facts("AVX512", ZEN4, "AVX512_CORE"), "float32", None),         # oneDNN held below its bf16 kernels
    (facts("AVX2", ZEN4), None, None),                               # only ATen forced down: measure
    (facts("DEFAULT", frozenset({"bf16", "sve"}), machine="aarch64"), None, None),
])
def test_the_cpu_facts_settle_what_they_can(cpu, train, decode):
    assert cpu_verdict(cpu, "train") == train
    assert cpu_verdict(cpu, "decode") == decode


def test_a_settled_choice_says_why_without_probing():
    choice = choose_dtype("train", "cpu", TINY, facts=facts("AVX2", ZEN4, "AVX2"))
    assert choice.dtype == "float32" and choice.probe is None
    assert choice.note("training compute dtype") == (
        "training compute dtype: float32 (auto: this CPU has AVX512_BF16; ATen AVX2, oneDNN up to AVX2)")
    assert choose_dtype("decode", "cpu", TINY, facts=facts("AVX512", ZEN4)).dtype == "bfloat16"


def test_an_open_question_is_probed_and_the_faster_dtype_taken(monkeypatch):
    timings = {"float32": 2.0, "bfloat16": 1.0}
    monkeypatch.setattr("rstar2.models.dtype_choice.probe_seconds", lambda *a, **k: dict(timings))
    choice = choose_dtype("decode", "cpu", TINY, rows=48, facts=facts("AVX2", ZEN2))
    assert choice.dtype == "bfloat16" and choice.probe == timings
    assert "probe of a decode matmul 48x64x128: float32 2000.00 ms, bfloat16 1000.00 ms" in choice.reason
    timings["bfloat16"] = 1.95  # a near tie keeps float32's precision
    assert choose_dtype("train", "cpu", TINY, facts=facts("AVX2", ZEN4)).dtype == "float32"


@pytest.mark.parametrize("purpose", ["train", "decode"])
def test_the_probe_times_both_dtypes_within_its_budget(purpose):
    started = time.perf_counter()
    seconds = probe_seconds(purpose, ModelShapes(hidden=576, intermediate=1536), rows=64, budget_s=0.3)
    elapsed = time.perf_counter() - started
    assert set(seconds) == {"float32", "bfloat16"} and all(0 < s < 0.3 for s in seconds.values())
    assert elapsed < 0.3 + 2.0  # the budget, warm-up and one last pass of each


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512_bf16\n\n"
                    "processor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(path) == frozenset({"fpu", "avx2", "avx512_bf16"})
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_this_machine_reads_as_torch_sees_it(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    here = CpuFacts.read()
    assert here.capability == torch.backends.cpu.get_cpu_capability() and here.onednn_isa == "AVX2"
    assert cpu_verdict(here, "train") == "float32"
