"""The device setting: 'auto' picks CUDA only when there is a GPU, a missing GPU is a clear
error, and every command that runs a model takes ``--device`` and says which one it uses."""

import os

import pytest
import torch
from typer.testing import CliRunner

from rstar2.cli import app
from rstar2.engines.registry import EngineSpec
from rstar2.engines.hf import HFEngineConfig
from rstar2.models.device import device_note, resolve_device
from rstar2.models.loading import cpu_threads
from tests.run.test_config import RECIPES

runner = CliRunner()
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")


def test_auto_picks_cuda_exactly_when_it_is_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert device_note("auto").startswith("device: cpu (auto: no CUDA GPU available), ")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")


def test_cpu_threads_follow_omp_num_threads_else_every_core_and_a_busy_machine_is_named(monkeypatch):
    import rstar2.models.loading as loading

    monkeypatch.setattr(loading, "busy_cores", lambda: 0.0)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert cpu_threads() == (cores, "every core this process may use")
    assert device_note("cpu") == f"device: cpu, {cores} thread{'s' * (cores != 1)} (every core this process may use)"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_threads() == (3, "OMP_NUM_THREADS")
    assert device_note("cpu") == "device: cpu, 3 threads (OMP_NUM_THREADS)"
    for bad in ("0", "two", "4,2"):
        monkeypatch.setenv("OMP_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="OMP_NUM_THREADS"):
            cpu_threads()
    # beside other work, the note says how many threads would not wait on it; never where the
    # user chose the number
    monkeypatch.setattr(loading, "busy_cores", lambda: 1.2)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert "busy" not in device_note("cpu")
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    assert device_note("cpu") == ("device: cpu, 4 threads (every core this process may use); other "
                                  "work keeps about 1.2 cores busy: generation gives up a thread per core "
                                  "it keeps busy, and --threads 3 does so for training too")


def test_the_threads_option_sets_the_process_s_threads_before_the_model_loads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # restored after the test, as the torch setting is
    before = torch.get_num_threads()
    try:
        result = runner.invoke(app, ["chat", "--prompt", "Say hi.", "--no-tools", "--max-tokens", "16",
                                     "--temperature", "0", "--dtype", "float32", "--threads", "1"])
        assert result.exit_code == 0, result.output
        assert "device: cpu (auto: no CUDA GPU available), 1 thread (OMP_NUM_THREADS)" in result.output
        assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
    finally:
        torch.set_num_threads(before)
    refused = runner.invoke(app, ["chat", "--prompt", "hi", "--threads", "0"])
    assert refused.exit_code == 2 and "--threads" in refused.output


@no_cuda
def test_cuda_without_a_gpu_and_bad_names_are_clear_errors():
    with pytest.raises(ValueError, match="'cuda:1' was asked for but torch sees no CUDA GPU"):
        resolve_device("cuda:1")
    with pytest.raises(ValueError, match=r"device must be 'auto' .* \(got 'gpu'\)"):
        resolve_device("gpu")
    for config in (HFEngineConfig, EngineSpec):
        assert config().device == "auto"
        with pytest.raises(ValueError, match="device"):
            config(device="gpu0")


@pytest.mark.parametrize("verb", ["demo", "train", "eval", "chat", "serve-model"])
def test_every_model_command_has_a_device_option(verb):
    result = runner.invoke(app, [verb, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--device" in result.output and "'auto'" in result.output


def test_device_cpu_runs_a_command_end_to_end():
    result = runner.invoke(app, ["chat", "--prompt", "Say hi.", "--no-tools", "--max-tokens", "16",
                                 "--temperature", "0", "--dtype", "float32", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "device: cpu" in result.output and "<reason>" in result.output


@no_cuda
@pytest.mark.parametrize("args", [
    ["chat", "--prompt", "hi", "--no-tools", "--device", "cuda"],
    ["serve-model", "--device", "cuda"],
    ["eval", "--bench", "gsm8k", "--device", "cuda"],
    ["train", str(RECIPES / "cpu-demo.yaml"), "--device", "cuda"],
    ["demo", "--device", "cuda", "--name", "never-made"],
])
def test_asking_for_a_missing_gpu_fails_in_one_line(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "error: device 'cuda' was asked for but torch sees no CUDA GPU" in result.output
    assert "Traceback" not in result.output


def test_a_bad_device_name_in_a_recipe_is_reported_by_field_in_words():
    result = runner.invoke(app, ["train", str(RECIPES / "cpu-demo.yaml"), "--device", "gpu"])
    assert result.exit_code == 2
    assert ("model.device: device must be 'auto' (cuda when a GPU is available, else cpu), 'cpu', "
            "'cuda' or 'cuda:N' (got 'gpu')") in result.output
    assert "pattern" not in result.output
