"""`rstar2 train` on the paper's 14B recipes, on a machine without vLLM (the [gpu] extra their
engine members need), says what they need in one line (after the device note), before it
writes anything."""

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rstar2.cli import app

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_14b_recipes_say_what_they_need(stage, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, as without the extra
    recipe = REPO / "recipes" / f"qwen3-14b-stage{stage}.yaml"
    assert recipe.read_text().startswith("# NEEDS ")
    result = CliRunner().invoke(app, ["train", str(recipe), "--set", f"runs_dir={tmp_path}"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)  # no traceback
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "pip install 'rstar2[gpu]'" in errors[0] and "Traceback" not in result.output
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
