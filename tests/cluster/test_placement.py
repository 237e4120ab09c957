"""The Ray placement meets the ``Placement`` protocol, and what it hands to the ranks and
members, which Ray may start in another directory on another node, are absolute paths to what
exists here."""

from pathlib import Path

import pytest

from rstar2.run.placement import Placement
from rstar2.run.recipe import load_config
from rstar2.run.settings import cluster_job, learner_settings

pytest.importorskip("ray", reason="the Ray placement needs the [ray] extra")
RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_paths_the_ranks_open_are_made_absolute(tmp_path, monkeypatch):
    from rstar2.cluster.placement import RayPlacement

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "sft").mkdir(parents=True)
    (tmp_path / "runs" / "stage1" / "checkpoints").mkdir(parents=True)
    config = load_config(RECIPES / "qwen3-14b-stage2.yaml",
                         ["model.path=models/sft", "rl.init.checkpoint=runs/stage1/checkpoints"])
    placement = RayPlacement(cluster_job(config))
    assert isinstance(placement, Placement)  # what run_training drives
    placed = placement.job
    assert placed.model.path == str(tmp_path / "models" / "sft")
    assert placed.rl.init.checkpoint == str(tmp_path / "runs" / "stage1" / "checkpoints")
    assert placed.rl.optimizer == config.rl.optimizer  # nothing else changes
    checkpoints = learner_settings(config).checkpoints  # where the ranks write
    assert checkpoints == tmp_path / "runs" / "qwen3-14b-stage2" / "checkpoints"
    elsewhere = load_config(RECIPES / "cpu-cluster.yaml", ["model.path=Org/name"])
    assert RayPlacement(cluster_job(elsewhere)).job.model.path == "Org/name"  # left for its loader
    assert RayPlacement(cluster_job(load_config(RECIPES / "cpu-cluster.yaml"))).job.model.path == "default"
