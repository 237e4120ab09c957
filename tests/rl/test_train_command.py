"""`rstar2 train` on a recipe this trainer cannot run says what it needs in one line, before it
writes anything."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rstar2.cli import app

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_14b_recipes_say_what_they_need(stage, tmp_path):
    recipe = REPO / "recipes" / f"qwen3-14b-stage{stage}.yaml"
    assert "NEEDS vLLM engine members" in recipe.read_text().splitlines()[0]
    result = CliRunner().invoke(app, ["train", str(recipe), "--set", f"runs_dir={tmp_path}"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)  # no traceback
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert result.output.startswith("error: ") and "vLLM engines as Ray actor members" in result.output
    assert list(tmp_path.iterdir()) == []  # nothing written
