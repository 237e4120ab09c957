"""`rstar2 eval` end to end with the real embedded model, sandbox and grader.

Runs that must be reproducible (the resume test) sample greedily with one sample in flight:
the engine then computes every sample alone, so an interrupted and an uninterrupted run draw
the very same tokens and only the harness can make their results differ.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from rstar2.agent.rollout import RolloutConfig
from rstar2.agent.tools import ToolSpec
from rstar2.data.benchmarks import PACKAGED_DATA_DIR
from rstar2.eval.runner import EvalSettings, RunConflict, check_output_dir
from tests.engines.serving import serve_model_process

REPRODUCIBLE = ["-n", "2", "--temperature", "0", "-c", "1", "--max-tokens", "16", "--max-turns", "3", "-q"]


def rstar2(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rstar2", *args], capture_output=True, text=True, timeout=timeout)


def custom_benchmark(path, count: int):
    """The first ``count`` GSM8K problems as a custom benchmark file (no ids: named by line)."""
    rows = [json.loads(line) for line in (PACKAGED_DATA_DIR / "gsm8k_test.jsonl").open()][:count]
    path.write_text("".join(json.dumps({"problem": r["problem"], "answer": r["answer"]}) + "\n" for r in rows))
    return path


def sample_lines(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def metrics(run_dir) -> dict:
    document = json.loads((run_dir / "results.json").read_text())
    return {"benchmarks": document["benchmarks"], "problems": document["problems"]}


def kill_after_samples(args: list[str], samples_path, count: int, timeout: float = 600) -> None:
    """Start ``rstar2 eval`` and SIGKILL its whole process group once ``count`` samples are logged."""
    process = subprocess.Popen([sys.executable, "-m", "rstar2", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if samples_path.is_file() and samples_path.read_text().count("\n") >= count:
                break
            time.sleep(0.05)
        assert process.poll() is None, "the run finished before it could be killed"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_resume_after_a_kill_gives_the_results_of_an_uninterrupted_run(tmp_path):
    bench = str(custom_benchmark(tmp_path / "tiny.jsonl", 4))
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"

    done = rstar2("eval", "--bench", bench, *REPRODUCIBLE, "--out", str(whole))
    assert done.returncode == 0, done.stderr
    assert "| tiny | 4 | 2 |" in done.stdout

    kill_after_samples(["eval", "--bench", bench, *REPRODUCIBLE, "--out", str(resumed)],
                       resumed / "samples.jsonl", count=3)
    before_kill = sample_lines(resumed)
    assert 3 <= len(before_kill) < 8 and not (resumed / "results.json").exists()
    with (resumed / "samples.jsonl").open("a") as log:  # a line cut short by the kill
        log.write(json.dumps(before_kill[0])[:70])

    refused = rstar2("eval", "--bench", bench, *REPRODUCIBLE, "--out", str(resumed))
    assert refused.returncode == 2 and "pass --resume" in refused.stderr
    finished = rstar2("eval", "--bench", bench, *REPRODUCIBLE, "--out", str(resumed), "--resume")
    assert finished.returncode == 0, finished.stderr

    lines = sample_lines(resumed)
    assert lines[: len(before_kill)] == before_kill
    assert sorted((r["problem_id"], r["sample"]) for r in lines) == sorted(
        (f"tiny-{line}", i) for line in range(1, 5) for i in range(2))
    assert metrics(resumed) == metrics(whole)

    compared = rstar2("eval", "compare", str(whole), str(resumed))
    assert compared.returncode == 0 and "4 problems in both: 0 better in B, 0 worse, 4 the same." in compared.stdout


def test_resume_refuses_other_generation_settings(tmp_path):
    settings = EvalSettings(benchmarks=["gsm8k"], temperature=0.6)
    (tmp_path / "config.json").write_text(json.dumps(settings.model_dump()))
    (tmp_path / "samples.jsonl").write_text('{"partial": ')
    with pytest.raises(RunConflict, match="pass --resume"):
        check_output_dir(tmp_path, settings, resume=False)
    check_output_dir(tmp_path, settings.model_copy(update={"n": 32, "limit": 5}), resume=True)
    with pytest.raises(RunConflict, match=r"temperature: 0.6 -> 1.0; tools: True -> False"):
        check_output_dir(tmp_path, settings.model_copy(update={"temperature": 1.0, "tools": False}), resume=True)
    with pytest.raises(RunConflict, match=r"tool_specs: \['python'\] -> \['python', 'calculator'\]"):
        check_output_dir(tmp_path, settings.model_copy(update={"tool_specs": (ToolSpec(use="python"),
                                                                              ToolSpec(use="calculator"))}),
                         resume=True)


def test_resume_takes_the_same_model_folder_however_its_path_is_written(tmp_path, monkeypatch):
    (tmp_path / "runs" / "final").mkdir(parents=True)
    (tmp_path / "runs" / "other").mkdir()
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "eval"
    out.mkdir()
    settings = EvalSettings(benchmarks=["gsm8k"], model="runs/final")
    (out / "config.json").write_text(json.dumps(settings.model_dump()))
    (out / "samples.jsonl").write_text('{"partial": ')
    for same in (str(tmp_path / "runs" / "final"), "./runs/final", "runs/../runs/final/"):
        check_output_dir(out, settings.model_copy(update={"model": same}), resume=True)
    with pytest.raises(RunConflict, match="model: 'runs/final' -> 'runs/other'"):
        check_output_dir(out, settings.model_copy(update={"model": "runs/other"}), resume=True)
    with pytest.raises(RunConflict, match="model: 'runs/final' -> 'org/final'"):  # a hub id, not the folder
        check_output_dir(out, settings.model_copy(update={"model": "org/final"}), resume=True)


def test_a_run_recorded_before_tool_specs_resumes_with_the_default_tools(tmp_path):
    settings = EvalSettings(benchmarks=["gsm8k"])
    older = {name: value for name, value in settings.model_dump(mode="json").items() if name != "tool_specs"}
    (tmp_path / "config.json").write_text(json.dumps(older))
    (tmp_path / "samples.jsonl").write_text('{"partial": ')
    check_output_dir(tmp_path, settings, resume=True)
    with pytest.raises(RunConflict, match="tool_specs"):
        check_output_dir(tmp_path, settings.model_copy(update={"tool_specs": (ToolSpec(use="calculator"),)}),
                         resume=True)


def test_cli_errors_are_clear(tmp_path):
    missing = rstar2("eval", "-n", "2")
    assert missing.returncode == 2 and "--bench is required" in missing.stderr
    unknown = rstar2("eval", "--bench", "aime2030")
    assert unknown.returncode == 2 and "unknown benchmark 'aime2030'" in unknown.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1+1?"}\n{"problem": "", "answer": "2"}\n')
    rows = rstar2("eval", "--bench", str(bad))
    assert rows.returncode == 2 and "line 1: missing 'answer'" in rows.stderr and "line 2: empty 'problem'" in rows.stderr
    no_results = rstar2("eval", "compare", str(tmp_path), str(tmp_path))
    assert no_results.returncode == 2 and "no results" in no_results.stderr


@pytest.fixture()
def served_model():
    """``rstar2 serve-model`` with the embedded model on a free port; its /v1 URL."""
    with serve_model_process() as (_, url):
        yield f"{url}/v1"


def test_eval_against_an_openai_compatible_server(tmp_path, served_model, sandbox_url):
    out = tmp_path / "served"
    done = rstar2("eval", "--bench", "gsm8k", "--limit", "2", "-n", "2", "--max-tokens", "64", "--engine", "openai",
                  "--base-url", served_model, "--sandbox-url", sandbox_url, "--out", str(out), "-q")
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["run"]["engine"] == "openai" and results["benchmarks"]["gsm8k"]["samples"] == 4
    assert all(0 < r["response_tokens"] <= 64 and r["response"] for r in sample_lines(out))
    assert (out / "results.md").read_text().count("| gsm8k | 2 | 2 |") == 1


@pytest.mark.parametrize("field", ["temperature", "top_p"])
def test_a_sampling_value_float32_cannot_hold_is_refused_when_the_settings_load(field):
    # the sampler computes in float32: 1e-300 would be zero there, and a rollout would only
    # fail (or sample garbage) once the engine is asked
    with pytest.raises(ValidationError, match="float32"):
        EvalSettings(benchmarks=["gsm8k"], **{field: 1e-300})
    with pytest.raises(ValidationError, match="float32"):
        RolloutConfig(**{field: 1e-300})
    assert getattr(EvalSettings(benchmarks=["gsm8k"], **{field: 2.0**-126}), field) == 2.0**-126


def test_the_paper_sizes_on_a_cpu_come_with_a_note_of_how_long_they_take(capsys):
    from rstar2.cli.eval import warn_of_paper_sizes

    warn_of_paper_sizes(EvalSettings(benchmarks=["gsm8k"], n=16, max_tokens=30000), None)
    note = capsys.readouterr().err
    assert note.startswith("note: 16 samples of up to 30000 tokens per problem, every problem on a CPU can take hours")
    assert "-n, --max-tokens and --limit" in note
    warn_of_paper_sizes(EvalSettings(benchmarks=["gsm8k"], n=2, max_tokens=30000), 20)
    warn_of_paper_sizes(EvalSettings(benchmarks=["gsm8k"], n=1, max_tokens=512), None)
    assert capsys.readouterr().err == ""
