"""The GSM8K recipe (recipes/gsm8k-cpu.yaml): its two-part config,
decontaminated SFT problems, the easiest-first RL candidates and the fixed evaluation subset;
slow: the whole pipeline (variants, SFT, the pass-rate curriculum, one RL step) on the real
model, sandbox and verifier, evaluated on GSM8K test problems with the tool."""

import json

import pytest
import torch
from typer.testing import CliRunner

from rstar2 import RECIPES
from rstar2.cli import app
from rstar2.data import find_overlaps, load_benchmark
from rstar2.demo.gsm8k import RECIPE, easiest_first, gsm8k_splits, load_recipe, run_gsm8k
from rstar2.run.recipe import ConfigError


def test_recipe_has_a_pipeline_section_and_an_rl_run(tmp_path):
    settings, config = load_recipe(RECIPE, ["gsm8k.sft.epochs=2", "rl.roc.mode=off", f"runs_dir={tmp_path}"],
                                   name="mine")
    assert settings.sft.epochs == 2 and config.rl.roc.mode == "off"
    assert config.name == "mine" and config.data.train == str(tmp_path / "mine" / "data" / "rl_train.jsonl")
    assert load_recipe(RECIPE, ["gsm8k.sft_model=runs/x/sft"])[1].model.path == "runs/x/sft"
    with pytest.raises(ConfigError, match=r"gsm8k\.sft_problem: unknown field"):
        load_recipe(RECIPE, ["gsm8k.sft_problem=3"])
    with pytest.raises(ConfigError, match=r"rl\.group_size"):
        load_recipe(RECIPE, ["rl.group_size=1"])


def test_splits_are_decontaminated_train_rows_and_reproducible():
    settings, config = load_recipe(RECIPE, ["gsm8k.sft_problems=300", "gsm8k.eval_problems=100"])
    splits = gsm8k_splits(settings, config.seed)
    assert (len(splits.sft), len(splits.evaluation)) == (300, 100)
    assert all(p.id.startswith("gsm8k-train-") for p in splits.sft)  # test problems are never trained on
    test = load_benchmark("gsm8k")
    assert splits.decontamination["overlapping_rows"] == len(splits.overlaps) > 0
    assert not find_overlaps(splits.sft, [test])  # what is left overlaps nothing
    everything = gsm8k_splits(settings.model_copy(update={"sft_problems": 0}), config.seed)
    assert len(everything.sft) == splits.decontamination["kept_rows"] == 7473 - len(splits.overlaps)
    assert {p.id for p in splits.evaluation} <= {p.id for p in test.problems}
    again = gsm8k_splits(settings, config.seed)
    assert [p.id for p in again.sft] == [p.id for p in splits.sft]
    assert [p.id for p in again.evaluation] == [p.id for p in splits.evaluation]
    assert [p.id for p in gsm8k_splits(settings, config.seed + 1).sft] != [p.id for p in splits.sft]


def test_rl_candidates_are_the_easiest_first():
    settings, config = load_recipe(RECIPE, ["gsm8k.sft_problems=200"])
    problems = gsm8k_splits(settings, config.seed).sft
    picked = easiest_first(problems, 30)
    steps = [len(p.row["solution"].split("<<")) - 1 for p in picked]
    assert steps == sorted(steps) and 1 <= steps[0] and steps[-1] <= 2
    for level in set(steps):  # the seeded order within a level
        within = [p.id for p, n in zip(picked, steps) if n == level]
        assert within == [p.id for p in problems if p.id in within]


def test_the_gpu_recipe_is_the_cpu_recipe_with_the_gpus_sizes():
    gpu_settings, gpu = load_recipe(RECIPES / "gsm8k-gpu.yaml")
    cpu_settings, cpu = load_recipe(RECIPE)
    assert gpu.name == "gsm8k-gpu" and gpu.data.train.endswith("gsm8k-gpu/data/rl_train.jsonl")
    assert gpu.model.device == "cuda" and (gpu_settings.sft_problems, gpu_settings.eval_problems) == (0, 0)
    assert gpu.rl.steps > cpu.rl.steps and gpu.rl.prompts_per_step > cpu.rl.prompts_per_step
    assert gpu_settings.rl_candidates > cpu_settings.rl_candidates
    for same in ("rollout", "engine"):  # how it samples, what it trains with: the CPU recipe's
        assert getattr(gpu, same) == getattr(cpu, same), same
    assert (gpu.rl.roc, gpu.rl.optimizer, gpu.rl.group_size) == (cpu.rl.roc, cpu.rl.optimizer, cpu.rl.group_size)
    assert (gpu_settings.sft.lr, gpu_settings.train, gpu_settings.test) == (cpu_settings.sft.lr, cpu_settings.train,
                                                                           cpu_settings.test)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_the_gpu_recipe_refuses_a_machine_without_one():
    result = CliRunner().invoke(app, ["demo", "--recipe", "gsm8k-gpu"])
    assert result.exit_code == 2 and "'cuda' was asked for but torch sees no CUDA GPU" in result.output
    assert "Traceback" not in result.output


def test_demo_command_refuses_bad_recipes_in_one_line(tmp_path):
    runner = CliRunner()
    cases = {
        ("--recipe", "gsm8k", "--set", "gsm8k.sft_problem=3"): "gsm8k.sft_problem: unknown field",
        ("--recipe", str(tmp_path / "none.yaml")): "cannot read recipe",
        ("--recipe", "gsm8k", "--set", f"gsm8k.train={tmp_path / 'none.jsonl'}"): "none.jsonl: no such file",
        ("--recipe", "gsm8k", "--set", "gsm8k.pass_rate_samples=1"): "gsm8k.pass_rate_samples: input should be greater",
    }
    for args, message in cases.items():
        result = runner.invoke(app, ["demo", *args])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_the_recipe_runs_sft_the_curriculum_rl_and_evaluation_on_the_real_model(tmp_path):
    summary = run_gsm8k(RECIPE, [
        f"runs_dir={tmp_path}", "gsm8k.sft_problems=8", "gsm8k.rl_candidates=4", "gsm8k.pass_rate_samples=2",
        "gsm8k.eval_problems=4", "gsm8k.eval_max_tokens=96", "gsm8k.sft.batch_size=8",
        "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2", "rollout.max_response_tokens=96",
    ], name="tiny")
    run = tmp_path / "tiny"
    data = summary["data"]
    assert data["sft_traces"] + sum(data["dropped"].values()) == 8 + data["sft_variants"] and data["sft_traces"] > 8
    assert summary["sft_loss_first_last"] and summary["rl_steps"] == 1
    assert set(summary["heldout"]) == {"base", "sft", "final"}
    for phase in summary["heldout"].values():
        low, high = phase["accuracy_ci"]
        assert low <= phase["accuracy"] <= high
        assert 0 <= phase["tool_error_ratio_in_correct"] <= 1
    assert summary["evaluated_on"] == "gsm8k (4 of 1319)"
    assert {"data", "sft", "pass_rate", "rl", "eval_base", "eval_sft", "eval_final"} <= summary["phase_seconds"].keys()
    assert len((run / "data" / "gsm8k_test_eval.jsonl").read_text().splitlines()) == 4
    assert "prompt=short" in (run / "eval" / "sft" / "results.md").read_text()  # the prompt it was asked with
    assert json.loads((run / "data" / "decontamination.json").read_text())["overlapping_rows"] > 0
    assert (run / "sft" / "final" / "config.json").is_file() and (run / "final" / "config.json").is_file()
    assert (run / "sft" / "metrics.jsonl").is_file()  # the cold start is an `rstar2 sft` run
    assert (run / "config.yaml").is_file() and (run / "metrics.jsonl").is_file()
    assert summary["rl_vs_sft"]["problems"] == 4 and len(summary["rl_groups_with_signal_per_step"]) == 1
    assert summary["dtypes"]["training"] in ("float32", "bfloat16")
