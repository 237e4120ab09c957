"""A distributed run killed after a checkpoint resumes like an uninterrupted one, at CI's size.

``rstar2 train recipes/cpu-cluster.yaml`` is run as a user runs it (a subprocess, ``--set``
overrides), on a tiny random Qwen3 (``tests.families``): ``RayPlacement`` places 2 FSDP2 learner
ranks (gloo), one engine member and one sandbox service on the module's local Ray cluster, which
every run joins through ``RAY_ADDRESS`` (as under ``ray job submit``) so that Ray starts once.
One run goes through uninterrupted; another is SIGKILLed (its whole process group) inside step 2,
after its step-1 checkpoint, and then continued with ``--resume``. Its own reward holds step 2
until the kill (``cluster_runs.held_reward``), so the kill lands at the same point on any machine.

A tiny random model samples anything, and the two runs may sample different tokens (the
member batches concurrent requests in arrival order), so only what holds for every sample is
compared: the steps logged (each once), the problems and learning rate of every step, the
checkpoints' position, schedule and AdamW step counts, and the exported ``final/`` folder, which
loads with ``load_model`` and holds exactly the weights of the last sharded checkpoint. The
exact restore of the shards' weights and AdamW moments is
``test_fsdp_learner.test_sharded_checkpoint_resumes_exactly_and_exports``; the same run at the
embedded model's size is ``test_cluster_run`` (slow).
"""

import json
import subprocess
import time

import pytest
import torch

from rstar2.models.loading import load_model
from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.training.runlog import read_metrics
from tests.cluster.cluster_runs import (
    HELD,
    HOLD_AFTER,
    REPO,
    kill_group,
    run_env,
    step_problems,
    train_command,
)

STEPS = 2
RUN_TIMEOUT_S = 300


def settings(runs, data, model) -> list[str]:
    """Each step one problem, two rollouts of at most 16 tokens, one turn; every group kept
    (so every step updates) and graded by ``held_reward``; one engine member and one sandbox
    worker, so that a run reserves the 4 CPUs of the module's cluster (``local_ray``)."""
    return [f"runs_dir={runs}", f"data.train={data}", f"model.path={model}", f"rl.steps={STEPS}",
            "rl.prompts_per_step=1", "rl.group_size=2", "rollout.max_response_tokens=16",
            "rollout.max_turns=1", "logging.rollouts_per_step=1", "rl.roc.drop_zero_variance=false",
            "rl.reward=tests.cluster.cluster_runs:held_reward", "rl.reward_deadline_s=1000",
            "cluster.engines.members=1", "cluster.sandbox.workers_per_service=1"]


def train(command, env) -> subprocess.CompletedProcess:
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def kill_inside_step(command, env, held, log) -> None:
    """Start the run, wait until ``held_reward`` holds it, and SIGKILL its process group."""
    with log.open("w") as out:
        run = subprocess.Popen(command, env=env, cwd=REPO, start_new_session=True, stdout=out,
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not held.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        kill_group(run)
    assert held.exists(), f"the run was not held (status {run.returncode}):\n{log.read_text()[-3000:]}"


def sharded_state(checkpoint, scratch) -> dict:
    """A sharded (DCP) checkpoint's model and optimizer state, read back in one process."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(checkpoint / "sharded", scratch)
    return torch.load(scratch, weights_only=True)


@pytest.mark.timeout(900)
def test_killed_run_on_a_tiny_model_resumes_like_an_uninterrupted_one(tmp_path, tiny_models, local_ray):
    data = write_problems(tmp_path / "rl.jsonl", split_tasks(seed=0, sft=1, rl=1, heldout=4).heldout)
    runs = tmp_path / "runs"
    sets = settings(runs, data, tiny_models["qwen3"])
    address = local_ray.get_runtime_context().gcs_address
    train(train_command("whole", sets), run_env(address))

    checkpoint, held = runs / "killed" / "checkpoints" / "step_00000001", tmp_path / "held"
    kill_inside_step(train_command("killed", sets),
                     run_env(address, **{HOLD_AFTER: str(checkpoint), HELD: str(held)}),
                     held, tmp_path / "killed.log")
    killed = runs / "killed"
    assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == [checkpoint.name]
    assert json.loads((checkpoint / "state.json").read_text())["step"] == 1
    assert [row["step"] for row in read_metrics(killed)] == [1] and not (killed / "final").exists()

    resumed = train(train_command("killed", sets, "--resume"), run_env(address))
    said = " ".join(resumed.stdout.split())  # the console wraps its lines
    assert "ray: joined" in said and "resuming" in said and "after step 1" in said

    whole = runs / "whole"
    rows = {run: read_metrics(run) for run in (whole, killed)}
    assert [r["step"] for r in rows[whole]] == [r["step"] for r in rows[killed]] == [1, 2]
    assert [r["train/lr"] for r in rows[killed]] == [r["train/lr"] for r in rows[whole]]
    for step in (1, 2):
        assert step_problems(killed, step) == step_problems(whole, step)
    last = {run: run / "checkpoints" / f"step_{STEPS:08d}" for run in (whole, killed)}
    assert json.loads((last[killed] / "state.json").read_text()) == \
        json.loads((last[whole] / "state.json").read_text())
    assert torch.load(last[killed] / "scheduler.pt", weights_only=True) == \
        torch.load(last[whole] / "scheduler.pt", weights_only=True)
    for run in (whole, killed):
        state = sharded_state(last[run], tmp_path / f"{run.name}.pt")
        # one AdamW step per step: the resumed run's optimizer went on from step 1's
        assert {float(s["step"]) for s in state["optimizer"]["state"].values()} == {STEPS}
        plain = load_model(str(run / "final"), dtype="float32").state_dict()
        assert plain.keys() == state["model"].keys()
        assert all(torch.equal(plain[k], state["model"][k]) for k in plain)
