"""What the cluster launcher hands to the ranks and members, which Ray may start in another
directory on another node: absolute paths to what exists here."""

from pathlib import Path

import pytest

from rstar2.rl.config import load_config

pytest.importorskip("ray", reason="the cluster launcher needs the [ray] extra")
RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_paths_the_ranks_open_are_made_absolute(tmp_path, monkeypatch):
    from rstar2.cluster.launch import with_absolute_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "sft").mkdir(parents=True)
    (tmp_path / "runs" / "stage1" / "checkpoints").mkdir(parents=True)
    config = load_config(RECIPES / "qwen3-14b-stage2.yaml",
                         ["model.path=models/sft", "rl.init.checkpoint=runs/stage1/checkpoints"])
    placed = with_absolute_paths(config)
    assert placed.model.path == str(tmp_path / "models" / "sft")
    assert placed.rl.init.checkpoint == str(tmp_path / "runs" / "stage1" / "checkpoints")
    assert placed.run_dir == tmp_path / "runs" / "qwen3-14b-stage2"
    assert placed.rl.optimizer == config.rl.optimizer  # nothing else changes
    elsewhere = with_absolute_paths(load_config(RECIPES / "cpu-cluster.yaml", ["model.path=Org/name"]))
    assert elsewhere.model.path == "Org/name"  # not here: left for its loader to judge
    assert with_absolute_paths(load_config(RECIPES / "cpu-cluster.yaml")).model.path == "default"
