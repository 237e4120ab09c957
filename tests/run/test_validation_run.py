"""Validation during training (``validation:``), through ``run_training`` as ``rstar2 train``
wires it, on a tiny random model with a reward that reads the row (``probe_rewards``): a held-out
row scores its own ``probe`` value, so each probe's accuracy is known before the run, and the
training rows score the parity of the response's length, so every step updates the policy.

Probes land in the rows of the expected steps (0, every k-th, the last), training with them is
the training without them (the same rollouts and metrics, seed for seed), a resumed run probes
only the steps it runs, and bad input is refused in one line."""

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rstar2.cli import app
from rstar2.run.placement import LocalPlacement
from rstar2.run.recipe import load_config
from rstar2.run.training import run_training
from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.training.runlog import read_metrics

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "cpu-demo.yaml"
PROBES = [1, 0, 1, 1, 0]  # each held-out row's reward; validation.limit=4 probes the first four
VAL_KEYS = {"val/accuracy", "val/problems", "val/tool_call_rate", "val/tool_error_ratio", "val/reward_failures",
            "time/validation"}


@pytest.fixture
def data(tmp_path) -> tuple[Path, Path]:
    """Two training problems, and the held-out file of ``PROBES``."""
    train = write_problems(tmp_path / "train.jsonl", split_tasks(seed=0, sft=1, rl=2, heldout=2).rl)
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text("".join(json.dumps({"id": f"h{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i),
                                           "probe": probe}) + "\n" for i, probe in enumerate(PROBES)))
    return train, heldout


def train(tmp_path, model, sandbox_url, train_file, name, *settings, resume=False) -> Path:
    config = load_config(RECIPE, [
        f"runs_dir={tmp_path / 'runs'}", f"name={name}", f"model.path={model}", f"data.train={train_file}",
        f"sandbox.urls=[{sandbox_url}]", "engine.dtype=null", "model.compute_dtype=float32", "model.device=cpu",
        "rl.steps=3", "rl.prompts_per_step=1", "rl.group_size=2", "rl.roc.mode=off",
        "rl.roc.drop_zero_variance=false", "rl.reward=tests.run.probe_rewards:parity_or_probe",
        "rollout.max_response_tokens=16", "rollout.max_turns=1", *settings])
    asyncio.run(run_training(config, LocalPlacement(config), resume=resume))
    return config.run_dir


def training_part(row: dict) -> dict:
    """A metrics row without what differs between two runs of one seed: seconds, and the probes."""
    return {key: value for key, value in row.items() if not key.startswith(("time/", "val/"))}


def sampled(run: Path, step: int) -> list[tuple]:
    """What each rollout of ``step`` said and earned, and whether the update used it."""
    rows = [json.loads(line) for line in (run / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
    return [(row["problem_id"], row["rollout"], row["response"], row["reward"], row["kept"]) for row in rows]


def test_probes_every_two_steps_land_at_0_2_and_3_and_leave_training_as_it_was(tmp_path, data, sandbox_url):
    """On the real model, whose prompts share the system prompt's tokens, which the engine
    computes once and keeps: a probe that left its cache to the next step would change how that
    step batches and what it samples."""
    train_file, heldout = data
    model = "default"
    off = train(tmp_path, model, sandbox_url, train_file, "off")
    on = train(tmp_path, model, sandbox_url, train_file, "on", "validation.every_steps=2",
               f"validation.data={heldout}", "validation.limit=4")
    rows = read_metrics(on, before_training=True)
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    assert set(rows[0]) == {"step", *VAL_KEYS}  # the policy before its first step
    probed = [row for row in rows if VAL_KEYS <= row.keys()]
    assert [row["step"] for row in probed] == [0, 2, 3]
    assert all(row["val/accuracy"] == 0.75 and row["val/problems"] == 4 for row in probed)
    assert not any(key.startswith("val/") for row in read_metrics(off) for key in row)
    # the same training, step for step: the same rollouts, and the same numbers up to the rounding
    # of how the engine happened to batch the two rollouts of a step (with or without probes)
    assert all("train/grad_norm" in row for row in read_metrics(off))  # every step updated
    for with_probes, without in zip(read_metrics(on), read_metrics(off), strict=True):
        assert sampled(on, without["step"]) == sampled(off, without["step"])
        assert training_part(with_probes) == pytest.approx(training_part(without), rel=1e-4, abs=1e-5)


def test_a_resumed_run_probes_only_the_steps_it_runs(tmp_path, data, tiny_models, sandbox_url):
    train_file, heldout = data
    probes = ["validation.every_steps=2", f"validation.data={heldout}"]
    run = train(tmp_path, tiny_models["llama"], sandbox_url, train_file, "resumed", "rl.steps=2", *probes)
    train(tmp_path, tiny_models["llama"], sandbox_url, train_file, "resumed", "rl.steps=3", *probes, resume=True)
    rows = read_metrics(run, before_training=True)
    assert [row["step"] for row in rows] == [0, 1, 2, 3]  # step 0 and 2 were logged before the resume
    assert [row["step"] for row in rows if "val/accuracy" in row] == [0, 2, 3]
    assert all(row["val/problems"] == len(PROBES) for row in rows if "val/accuracy" in row)


@pytest.mark.parametrize("settings, named", [
    (["validation.every_steps=2"], "validation: every_steps needs data"),
    (["validation.every_steps=2", "validation.data={missing}"], "validation.data: "),
])
def test_bad_validation_input_is_refused_in_one_line_before_anything_is_written(settings, named, tmp_path, data):
    train_file, _ = data
    missing = tmp_path / "missing.jsonl"
    arguments = [f"runs_dir={tmp_path / 'runs'}", f"data.train={train_file}", "engine.dtype=null",
                 "model.compute_dtype=float32", *(setting.format(missing=missing) for setting in settings)]
    result = CliRunner().invoke(app, ["train", str(RECIPE), "--device", "cpu",
                                      *(word for setting in arguments for word in ("--set", setting))])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and named in errors[0], result.output
    assert "Traceback" not in result.output and not (tmp_path / "runs").exists()
    if "{missing}" in settings[-1]:
        assert str(missing) in errors[0]
