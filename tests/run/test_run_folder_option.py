"""`--out DIR` on `rstar2 train` and `rstar2 sft` names the run folder itself, as `eval --out`
does; with `--name` as well it is refused in one line."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rstar2.cli import app
from rstar2.cli.options import recipe_overrides
from rstar2.run.recipe import load_config
from rstar2.sft.config import load_sft_config

REPO = Path(__file__).resolve().parents[2]


def test_out_is_the_run_folder_of_train_and_sft_recipes(tmp_path):
    out = tmp_path / "elsewhere" / "try-3"
    overrides = recipe_overrides(["rl.steps=2"], None, None, out)
    assert overrides == ["rl.steps=2", f"runs_dir={out.parent}", "name=try-3"]
    assert load_config(REPO / "recipes" / "cpu-demo.yaml", overrides).run_dir == out
    sft = load_sft_config(REPO / "recipes" / "qwen3-1.7b-sft.yaml", recipe_overrides(None, None, None, out))
    assert sft.run_dir == out


@pytest.mark.parametrize(("command", "recipe"), [("train", "cpu-demo.yaml"), ("sft", "qwen3-1.7b-sft.yaml")])
def test_out_with_name_is_refused_in_one_line(tmp_path, command, recipe):
    result = CliRunner().invoke(app, [command, str(REPO / "recipes" / recipe), "--out", str(tmp_path / "a"),
                                      "--name", "b"])
    assert result.exit_code == 2 and "--out and --name both say where the run goes" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "a").exists()
