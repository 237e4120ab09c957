"""`rstar2 demo`, the README's first command, run through the CLI at tiny sizes on a tiny random
model, so that CI runs every phase of it: the arithmetic demo and the GSM8K recipe end to end
(data, SFT, GRPO-RoC, three evaluations, the summary and the closing lines), RL from an earlier
run's SFT model (`--sft-model`; `gsm8k.sft_model` with `gsm8k.rl_train`, the docs' way to compare
RoC on and off from one start), and bad input refused in one line before anything is written.

A random model samples arbitrary text, so only what holds for every sample is checked: files,
fields, counts equal to the sizes set, figures within [0, 1]; never an accuracy or a text. The
pipeline on the real model is the `slow` tests' (tests/sft/test_gsm8k_recipe.py)."""

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rstar2.agent.card import read_card
from rstar2.cli import app
from rstar2.demo import pipeline
from rstar2.engines.hf import HFEngine
from rstar2.training.runlog import read_metrics

# the arithmetic demo's sizes, set with --set demo.*
# more held-out problems than the RL engine's batch (rl_sizes: 2 prompts x 2G = 8 rollouts each)
SFT, SFT_HARD, RL_PROBLEMS, RL_BASIC, HELDOUT = 4, 2, 4, 1, 20
ENGINE_BATCH = 16
DEMO_SIZES = [word for setting in (
    f"demo.sft_problems={SFT}", f"demo.sft_hard_problems={SFT_HARD}", f"demo.rl_problems={RL_PROBLEMS}",
    f"demo.rl_basic_problems={RL_BASIC}",
    f"demo.heldout_problems={HELDOUT}", "demo.eval_max_tokens=32") for word in ("--set", setting)]
RL_STEPS = 2  # fewer than the 3 silent steps after which a run without signal stops early
# GSM8K sizes, all set with --set
GSM8K_SFT, GSM8K_CANDIDATES, GSM8K_SAMPLES, GSM8K_EVAL = 4, 2, 2, 3


def rl_sizes(runs: Path, model: Path, steps: int) -> list[str]:
    """The RL run's tiny sizes and the tiny model, as --set options."""
    settings = [f"runs_dir={runs}", f"model.path={model}", f"rl.steps={steps}", "rl.prompts_per_step=2",
                "rl.group_size=4", "rollout.max_response_tokens=32"]
    return [word for setting in settings for word in ("--set", setting)]


GSM8K_SIZES = [word for setting in (
    f"gsm8k.sft_problems={GSM8K_SFT}", f"gsm8k.rl_candidates={GSM8K_CANDIDATES}",
    f"gsm8k.pass_rate_samples={GSM8K_SAMPLES}", f"gsm8k.eval_problems={GSM8K_EVAL}", "gsm8k.eval_max_tokens=32",
    "gsm8k.sft.batch_size=8") for word in ("--set", setting)]


def demo(*args: str):
    """``rstar2 demo ARGS`` in this process, with the policies it loads recorded (``.loaded``):
    the model directories the RL policy came from; how often its engine freed its cache
    (``.released``); and the most requests its engine held at once, queued or decoding
    (``.most_requests``)."""
    loaded, load_policy = [], pipeline.load_policy
    released, release_cache = [], HFEngine.release_cache
    most, submit = [0], HFEngine.submit

    def submitting(engine, *rest, **named):
        futures = submit(engine, *rest, **named)
        most[0] = max(most[0], len(engine.queue) + engine.table.n_active)
        return futures

    def recording(config, *rest, **named):
        loaded.append(config.path)
        return load_policy(config, *rest, **named)

    async def releasing(engine):
        released.append(engine.table.cache.k.numel())
        await release_cache(engine)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "load_policy", recording)
        patch.setattr(HFEngine, "release_cache", releasing)
        patch.setattr(HFEngine, "submit", submitting)
        patch.setenv("COLUMNS", "1000")  # the closing lines unwrapped
        result = CliRunner().invoke(app, ["demo", "--device", "cpu", *args])
    assert result.exit_code == 0, result.output[-3000:]
    result.loaded, result.released, result.most_requests = loaded, released, most[0]
    return result


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def first(runs, tiny_models):
    """`rstar2 demo` with the SFT in float32 (`--sft-dtype`)."""
    return demo("--name", "first", "--sft-dtype", "float32", *DEMO_SIZES, *rl_sizes(runs, tiny_models["llama"], RL_STEPS))


@pytest.fixture(scope="module")
def from_sft(runs, tiny_models, first):
    """RL with RoC off from the first run's SFT model, as docs/demo.md compares them."""
    start = runs / "first" / "sft" / "final"
    before = digest(start)
    result = demo("--name", "from-sft", "--sft-model", str(start), "--set", "rl.roc.mode=off", *DEMO_SIZES,
                  *rl_sizes(runs, tiny_models["llama"], 1))
    return result, start, before


def check_phase(run: Path, label: str, phase: dict, problems: int) -> None:
    """A held-out evaluation's figures are proportions, and its files hold one answer a problem."""
    low, high = phase["accuracy_ci"]
    assert 0 <= low <= phase["accuracy"] <= high <= 1, phase
    assert all(0 <= phase[key] <= 1 for key in ("tool_call_rate", "tool_error_ratio", "tool_error_ratio_in_correct"))
    assert phase["results"] == str(run / "eval" / label / "results.md") and Path(phase["results"]).is_file()
    assert len(lines(run / "eval" / label / "samples.jsonl")) == problems


def closing_lines(output: str, run: Path, phases: str, steps: int) -> None:
    """The closing note: accuracies of the phases run, in order, then the RL steps and the folder."""
    text = output.splitlines()
    accuracy = next(line for line in text if line.startswith(("held-out accuracy", "gsm8k (")))
    assert [part.split()[0] for part in accuracy.split(": ", 1)[1].split(" -> ")] == phases.split(), accuracy
    assert any(line.startswith(f"tool-call rate: {phases.split()[0]} ") for line in text)
    assert any(line.startswith(f"RL: {steps} steps, ") for line in text)
    assert any(line.startswith("wall time ") for line in text)
    assert any(line.startswith(f"run folder {run}: curves.png, summary.json") for line in text)


def test_the_demo_runs_sft_rl_and_three_evaluations_and_writes_what_the_docs_list(first, runs, tiny_models):
    """The run folder docs/demo.md describes, with counts equal to the sizes set: what `rstar2
    chat`, `view` and a later `--sft-model` run read."""
    run = runs / "first"
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["heldout"]) == {"base", "sft", "final"}
    for label, phase in summary["heldout"].items():
        check_phase(run, label, phase, HELDOUT)
    assert len(summary["sft_loss_first_last"]) == 2 and summary["rl_steps"] == RL_STEPS
    assert all(0 <= value <= 1 for value in summary["rl_accuracy_first_last"])
    # the gain is paired over the same held-out problems: exactly the difference of the accuracies
    gain, held = summary["rl_vs_sft"], summary["heldout"]
    assert gain["problems"] == HELDOUT
    assert gain["difference"] == pytest.approx(held["final"]["accuracy"] - held["sft"]["accuracy"])
    assert gain["ci"][0] <= gain["difference"] <= gain["ci"][1]
    assert any(line.startswith("SFT+RL - SFT: ") and f"paired bootstrap over {HELDOUT} problems" in line
               for line in first.output.splitlines())
    # per kind of problem (family and level), the same two models over the same problems
    kinds = summary["rl_vs_sft_by_kind"]
    assert sum(kind["problems"] for kind in kinds.values()) == HELDOUT
    assert sum(kind["problems"] * (kind["final"] - kind["sft"]) for kind in kinds.values()) == pytest.approx(
        gain["difference"] * HELDOUT)
    assert any(line.startswith("SFT -> SFT+RL by kind: ") for line in first.output.splitlines())
    probes = summary["rl_probe_accuracy_by_step"]  # before the first step and after the last
    assert {"0", str(RL_STEPS)} <= set(probes) and all(0 <= value <= 1 for value in probes.values())
    assert any(line.startswith("held-out probes during RL: step 0 ") for line in first.output.splitlines())
    used = summary["rl_groups_used_per_step"]
    assert len(used) == RL_STEPS and all(0 <= share <= 1 for share in used)
    # the engine's cache freed after each evaluation and before each update, each time in use
    assert len(first.released) == 3 + RL_STEPS and all(first.released)
    # the evaluations keep no more answers in flight than the engine decodes at once, so no
    # answer's next turn waits behind new prompts (which would evict its cached keys)
    assert first.most_requests == ENGINE_BATCH
    assert set(summary["phase_seconds"]) == {"data", "sft", "rl", "eval_base", "eval_sft", "eval_final"}
    assert summary["wall_time_s"] > 0 and summary["dtypes"]["training"] in ("float32", "bfloat16")
    # data/: the sizes set, the SFT traces as chat conversations
    data = run / "data"
    assert (f"data: {SFT + SFT_HARD} SFT traces, {RL_PROBLEMS + RL_BASIC} RL problems, "
            f"{HELDOUT} held-out problems in {data}") in first.output
    assert len(lines(data / "sft_problems.jsonl")) == SFT + SFT_HARD
    assert all(row["messages"][-1]["role"] == "assistant" for row in lines(data / "sft_traces.jsonl"))
    rl_levels = [row["level"] for row in lines(data / "rl_train.jsonl")]
    assert rl_levels == ["hard"] * RL_PROBLEMS + ["basic"] * RL_BASIC and len(lines(data / "heldout.jsonl")) == HELDOUT
    # the SFT is an `rstar2 sft` run in sft/, in the dtype --sft-dtype asked for
    assert yaml.safe_load((run / "sft" / "config.yaml").read_text())["train"]["compute_dtype"] == "float32"
    assert read_metrics(run / "sft") and (run / "sft" / "final" / "config.json").is_file()
    assert not (run / "sft" / "checkpoints").exists()  # the finished SFT goes on in process
    assert read_card(str(run / "sft" / "final")).trained_by == "rstar2 demo, SFT (first)"
    # the RL run: its config, one metrics row a step, rollouts, checkpoints, final model, curves
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["path"] == str(tiny_models["llama"])
    assert config["data"]["train"] == str(data / "rl_train.jsonl")
    assert [row["step"] for row in read_metrics(run)] == list(range(1, RL_STEPS + 1))
    assert any((run / "rollouts").iterdir()) and any((run / "checkpoints").iterdir())
    assert read_card(str(run / "final")).trained_by == "rstar2 demo, SFT + RL (first)"
    assert (run / "final" / "config.json").is_file()
    assert (run / "curves.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert first.loaded == [str(tiny_models["llama"])]
    closing_lines(first.output, run, "base SFT SFT+RL", RL_STEPS)


def test_sft_model_skips_the_sft_and_starts_rl_from_that_folder_unchanged(from_sft, runs):
    """Comparing RL settings from one start needs RL to load that folder and leave it as it was."""
    result, start, before = from_sft
    run = runs / "from-sft"
    assert result.loaded == [str(start)]  # the RL policy is the given SFT model
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["path"] == str(start) and config["rl"]["roc"]["mode"] == "off"
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["heldout"]) == {"sft", "final"}  # neither the base model nor an SFT run
    for label, phase in summary["heldout"].items():
        check_phase(run, label, phase, HELDOUT)
    assert summary["sft_loss_first_last"] == [] and summary["rl_steps"] == 1
    assert set(summary["phase_seconds"]) == {"data", "rl", "eval_sft", "eval_final"}
    assert not (run / "sft").exists() and not (run / "eval" / "base").exists()
    assert (run / "final" / "config.json").is_file() and (run / "curves.png").is_file()
    assert digest(start) == before  # the start stays as it was, for the next comparison
    closing_lines(result.output, run, "SFT SFT+RL", 1)


def test_a_folder_that_holds_an_earlier_demo_is_refused(first, runs, tiny_models):
    """A second run under the same name would mix two runs' files; it stops before writing any."""
    summary = (runs / "first" / "summary.json").read_text()
    result = CliRunner().invoke(app, ["demo", "--device", "cpu", "--name", "first",
                                      *rl_sizes(runs, tiny_models["llama"], 1)])
    assert refusal(result) == f"error: {runs / 'first'} holds an earlier demo; pass --name to start another"
    assert (runs / "first" / "summary.json").read_text() == summary


@pytest.fixture(scope="module")
def gsm8k_first(runs, tiny_models):
    """`rstar2 demo --recipe gsm8k` on the GSM8K train and test sets the package ships."""
    return demo("--recipe", "gsm8k", "--name", "gsm8k-first", "--sft-dtype", "float32", *GSM8K_SIZES,
                *rl_sizes(runs, tiny_models["llama"], 1))


@pytest.fixture(scope="module")
def gsm8k_second(runs, tiny_models, gsm8k_first):
    """RoC off from the first run's SFT model on its RL problems, as docs/gsm8k.md compares them."""
    first = runs / "gsm8k-first"
    return demo("--recipe", "gsm8k", "--name", "gsm8k-second", *GSM8K_SIZES,
                "--set", f"gsm8k.sft_model={first / 'sft' / 'final'}",
                "--set", f"gsm8k.rl_train={first / 'data' / 'rl_train.jsonl'}", "--set", "rl.roc.mode=off",
                *rl_sizes(runs, tiny_models["llama"], 1))


def test_the_gsm8k_recipe_runs_data_sft_curriculum_rl_and_evaluation(gsm8k_first, runs, tiny_models):
    """Every phase of docs/gsm8k.md's pipeline runs, and the summary's counts add up to the files."""
    run = runs / "gsm8k-first"
    summary = json.loads((run / "summary.json").read_text())
    data, curriculum = summary["data"], summary["curriculum"]
    assert data["sft_problems"] == GSM8K_SFT and data["eval_problems"] == GSM8K_EVAL
    assert data["sft_traces"] + sum(data["dropped"].values()) == GSM8K_SFT + data["sft_variants"]
    assert len(lines(run / "data" / "sft_traces.jsonl")) == data["sft_traces"]
    assert 1 <= data["rl_candidates"] <= GSM8K_CANDIDATES
    assert len(lines(run / "data" / "rl_candidates.jsonl")) == data["rl_candidates"] == curriculum["candidates"]
    assert len(lines(run / "data" / "gsm8k_test_eval.jsonl")) == GSM8K_EVAL
    overlaps = json.loads((run / "data" / "decontamination.json").read_text())["overlapping_rows"]
    assert overlaps == len(lines(run / "data" / "decontamination.overlaps.jsonl")) > 0
    # the curriculum: every candidate sampled k times, its RL problems written for the RL run
    assert curriculum["samples_each"] == GSM8K_SAMPLES
    assert curriculum["sometimes"] + curriculum["always"] + curriculum["never"] == curriculum["candidates"]
    assert len(lines(run / "eval" / "pass_rate" / "samples.jsonl")) == data["rl_candidates"] * GSM8K_SAMPLES
    assert len(lines(run / "data" / "rl_train.jsonl")) == curriculum["rl_problems"] >= 1
    assert summary["evaluated_on"] == f"gsm8k ({GSM8K_EVAL} of 1319)"
    assert set(summary["heldout"]) == {"base", "sft", "final"}
    for label, phase in summary["heldout"].items():
        check_phase(run, label, phase, GSM8K_EVAL)
    assert summary["rl_vs_sft"]["problems"] == GSM8K_EVAL and -1 <= summary["rl_vs_sft"]["difference"] <= 1
    assert summary["rl_steps"] == 1 and len(summary["rl_groups_with_signal_per_step"]) == 1
    shares = summary["rl_pass_rate_per_step"] + summary["rl_groups_with_signal_per_step"]
    assert all(0 <= share <= 1 for share in shares)
    assert {"data", "sft", "pass_rate", "rl", "eval_base", "eval_sft", "eval_final"} == set(summary["phase_seconds"])
    assert yaml.safe_load((run / "sft" / "config.yaml").read_text())["train"]["compute_dtype"] == "float32"
    assert read_card(str(run / "final")).trained_by == "rstar2 demo, SFT + RL (gsm8k-first)"
    assert (run / "curves.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert gsm8k_first.loaded == [str(tiny_models["llama"])]
    closing_lines(gsm8k_first.output, run, "base SFT SFT+RL", 1)


def test_gsm8k_rl_from_an_sft_model_on_given_problems_skips_data_sft_and_curriculum(gsm8k_second, runs):
    """RoC on vs off is a fair comparison only from the same SFT model, RL problems and test subset."""
    first, run = runs / "gsm8k-first", runs / "gsm8k-second"
    start, problems = first / "sft" / "final", first / "data" / "rl_train.jsonl"
    assert gsm8k_second.loaded == [str(start)]
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["path"] == str(start)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["curriculum"] == {"from": str(problems), "rl_problems": len(lines(problems))}
    assert [row["id"] for row in lines(run / "data" / "rl_train.jsonl")] == [row["id"] for row in lines(problems)]
    assert summary["data"]["sft_traces"] == summary["data"]["rl_candidates"] == 0  # no traces, no variants
    # the same evaluation subset, so that the two runs' final models compare problem by problem
    assert lines(run / "data" / "gsm8k_test_eval.jsonl") == lines(first / "data" / "gsm8k_test_eval.jsonl")
    assert set(summary["heldout"]) == {"sft", "final"}
    for label, phase in summary["heldout"].items():
        check_phase(run, label, phase, GSM8K_EVAL)
    assert not (run / "sft").exists() and not (run / "eval" / "base").exists()
    assert not (run / "eval" / "pass_rate").exists()
    assert {"sft", "eval_base"}.isdisjoint(summary["phase_seconds"]) and summary["rl_steps"] == 1
    closing_lines(gsm8k_second.output, run, "SFT SFT+RL", 1)


def refusal(result) -> str:
    """The one error line of a command refused without a traceback."""
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output[-3000:]
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.mark.parametrize("args, message", [
    (["--sft-model", "{missing}"], "model '{missing}' not found"),
    (["--recipe", "gsm8k", "--sft-model", "{missing}"], "model '{missing}' not found"),
    (["--set", "rl.stepz=1"], "rl.stepz: unknown field (did you mean rl.steps?)"),
    (["--set", "rl.steps"], "--set 'rl.steps': expected KEY=VALUE"),
    (["--set", "demo.heldout_problemz=4"], "demo.heldout_problemz: unknown field (did you mean heldout_problems"),
    (["--set", "demo.heldout_problems=1"], "demo.heldout_problems: input should be greater than or equal to 2 (got 1)"),
    (["--sft-dtype", "float16"], "unknown SFT dtype 'float16'"),
    # refused before the data, the base evaluation and the SFT, not when RL is about to start (the
    # tiny sizes: a regression fails in seconds)
    (["--recipe", "gsm8k", *GSM8K_SIZES, "--set", "gsm8k.rl_train={missing}.jsonl"], "{missing}.jsonl: no such file"),
], ids=["sft-model", "gsm8k-sft-model", "set-key", "set-syntax", "demo-key", "demo-value", "sft-dtype",
                                     "gsm8k-rl-train"])
def test_bad_input_is_refused_in_one_line_before_anything_is_written(args, message, tmp_path, tiny_models):
    """A typo must cost seconds, not a run: one `error:` line, exit 2, no folder."""
    missing = tmp_path / "no-such-model"
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["demo", "--device", "cpu", *(arg.format(missing=missing) for arg in args),
                                      *rl_sizes(runs, tiny_models["llama"], 1)])
    assert message.format(missing=missing) in refusal(result)
    assert not runs.exists()
