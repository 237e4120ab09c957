"""`rstar2 train` on the recipes whose engine members are vLLM (the paper's 14B stages, the 8-GPU
node), on a machine without vLLM (the [gpu] extra), says what they need in one line (after the
device note), before it writes anything."""

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rstar2.cli import app

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["qwen3-14b-stage1", "qwen3-14b-stage2", "qwen3-14b-stage3",
                                  "qwen3-1.7b-8gpu"])
def test_the_vllm_cluster_recipes_say_what_they_need(name, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, as without the extra
    recipe = REPO / "recipes" / f"{name}.yaml"
    assert recipe.read_text().startswith("# NEEDS ")
    result = CliRunner().invoke(app, ["train", str(recipe), "--set", f"runs_dir={tmp_path}"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)  # no traceback
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "pip install -e '.[gpu]'" in errors[0] and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("setting, named", [
    ("data.train={missing}", "no such file"),
    ("data.keep_ids={missing}", "data.keep_ids"),
    ("data.max_prompt_tokens=1", "no training problem fits"),
])
def test_bad_training_data_is_refused_in_one_line_before_anything_is_written(setting, named, tmp_path):
    missing, train = tmp_path / "missing.jsonl", tmp_path / "train.jsonl"
    train.write_text('{"id": "p1", "problem": "What is 6 * 7?", "answer": "42"}\n')
    result = CliRunner().invoke(app, ["train", str(REPO / "recipes" / "cpu-demo.yaml"),
                                      "--set", f"runs_dir={tmp_path / 'runs'}", "--set", f"data.train={train}",
                                      "--set", setting.format(missing=missing)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)  # no traceback
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and named in errors[0], result.output
    assert not (tmp_path / "runs").exists()  # nothing written


def test_the_demo_recipe_without_the_demo_data_says_where_the_data_comes_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a fresh checkout: no runs/ yet
    result = CliRunner().invoke(app, ["train", str(REPO / "recipes" / "cpu-demo.yaml")])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    assert "runs/cpu-demo/data/rl_train.jsonl: no such file" in errors[0]
    assert "`rstar2 demo`" in errors[0] and "--set data.train=PATH" in errors[0]


@pytest.mark.parametrize("setting, package", [("logging.tensorboard=true", "tensorboard"),
                                              ("logging.wandb_project=rstar2", "wandb")])
@pytest.mark.parametrize("verb", ["train", "demo"])
def test_a_logger_whose_package_is_missing_is_refused_before_any_model_loads(verb, setting, package,
                                                                             tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed, also where it is
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *args: None if name == package else object())
    arguments = [str(REPO / "recipes" / "cpu-demo.yaml")] if verb == "train" else []
    result = CliRunner().invoke(app, [verb, *arguments, "--set", setting, "--set", f"runs_dir={tmp_path}"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    field = setting.split("=")[0]
    # the only line: before the device note, the tokenizer and the model
    assert result.output.strip() == f"error: {field} needs the {package} package: pip install -e '.[{package}]' in the rstar2 clone"
    assert list(tmp_path.iterdir()) == []


def test_a_local_vllm_engine_without_vllm_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    train = tmp_path / "train.jsonl"
    train.write_text('{"id": "p1", "problem": "What is 6 * 7?", "answer": "42"}\n')
    result = CliRunner().invoke(app, ["train", str(REPO / "recipes" / "cpu-demo.yaml"),
                                      "--set", f"runs_dir={tmp_path / 'runs'}", "--set", f"data.train={train}",
                                      "--set", "engine.kind=vllm", "--set", "engine.dtype=null"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "pip install -e '.[gpu]'" in errors[0], result.output
    assert not (tmp_path / "runs").exists()
