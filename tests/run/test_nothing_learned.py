"""`rstar2 train` on a run that learns nothing fails: exit code 1, one error line that says why
and where the model is, no success line; the steps it ran are logged, checkpointed and the model
exported. On a tiny random model with rewards that do not depend on what it writes
(``tests.reward.custom_rewards``): one that raises on every call, one that gives every rollout 1."""

from pathlib import Path

from typer.testing import CliRunner

from rstar2.cli import app
from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.training.runlog import read_metrics

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "cpu-demo.yaml"
REWARDS = "tests.reward.custom_rewards"


def train(tmp_path, model, sandbox_url, *settings):
    """``rstar2 train`` of 5 steps over two problems, one a step; its result and run folder."""
    data = write_problems(tmp_path / "train.jsonl", split_tasks(seed=0, sft=1, rl=2, heldout=2).rl)
    arguments = [f"runs_dir={tmp_path / 'runs'}", "name=silent", f"model.path={model}", f"data.train={data}",
                 f"sandbox.urls=[{sandbox_url}]", "engine.dtype=null", "model.compute_dtype=float32",
                 "rl.steps=5", "rl.prompts_per_step=1", "rl.group_size=2", "rollout.max_response_tokens=8",
                 "rollout.max_turns=1", *settings]
    result = CliRunner().invoke(app, ["train", str(RECIPE), "--device", "cpu",
                                      *(word for setting in arguments for word in ("--set", setting))])
    return result, tmp_path / "runs" / "silent"


def failure_line(result) -> str:
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output[-3000:]
    assert "Traceback" not in result.output and "trained model in" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_a_run_whose_reward_always_fails_stops_and_fails_even_where_updates_would_go_on(
        tmp_path, tiny_models, sandbox_url):
    """Plain GRPO that keeps groups of equal rewards updates on every step (at advantage 0), so
    only the failed reward calls tell that nothing is learned."""
    result, run = train(tmp_path, tiny_models["llama"], sandbox_url, f"rl.reward={REWARDS}:raises",
                        "rl.roc.mode=off", "rl.roc.drop_zero_variance=false", "rl.max_silent_steps=2")
    line = failure_line(result)
    assert line.startswith("error: stopped after step 2 of 5, a failed run: every reward call of the last 2 "
                           "steps failed (4 of 4, each scored 0)")
    assert "the first: error: " in line and "no reward for" in line and f"{REWARDS}:raises" in line
    assert line.endswith(f"The model of step 2 is saved: {run / 'final'} (its checkpoint, for --resume, "
                         f"in {run / 'checkpoints'})")
    rows = read_metrics(run)
    assert [row["step"] for row in rows] == [1, 2] and all("train/grad_norm" in row for row in rows)
    assert (run / "final" / "config.json").is_file() and (run / "checkpoints" / "step_00000002").is_dir()


def test_a_run_whose_groups_all_score_alike_for_a_pass_stops_and_fails(tmp_path, tiny_models, sandbox_url):
    """Every rollout earns 1, so Resample-on-Correct drops every group and nothing trains: the
    run stops after one pass over its two problems (the floor, 3 steps), not after all 5."""
    result, run = train(tmp_path, tiny_models["llama"], sandbox_url, f"rl.reward={REWARDS}:long_answers",
                        "rl.group_size=4")  # the recipe's release rule keeps 2 of each outcome: G >= 4
    line = failure_line(result)
    assert line.startswith("error: stopped after step 3 of 5, a failed run: the last 3 steps trained nothing: "
                           "every rollout scored 1, so the policy did not change")
    assert "reward calls failed" not in line and "rl.max_silent_steps (3)" in line
    assert str(run / "rollouts" / "step_3.jsonl") in line and f"saved: {run / 'final'}" in line
    assert [row["step"] for row in read_metrics(run)] == [1, 2, 3]
    assert (run / "checkpoints" / "step_00000003").is_dir()  # forced: the recipe checkpoints by time
