"""`rstar2 train recipes/cpu-cluster.yaml` end to end on a local Ray cluster: 2 FSDP2 learner
ranks (gloo), 2 engine actors, one sandbox. A run killed (SIGKILL to its whole process group)
after its step-2 checkpoint resumes and finishes step 3 like an uninterrupted run: the same
problems and learning rate. The sampled tokens of step 3 are not
compared: two engine actors batch concurrent turns in arrival order, which timing decides.
CI runs the same at a tiny model's size: test_distributed_resume."""

import subprocess
import time

import pytest

from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.training.runlog import read_metrics
from tests.cluster.cluster_runs import kill_group, run_env, step_problems, train_command


def command(runs, data, name, *extra):
    settings = [f"runs_dir={runs}", f"data.train={data}", "rl.steps=3", "rl.prompts_per_step=2",
                "rl.group_size=2", "rollout.max_response_tokens=48", "rollout.max_turns=2",
                "logging.rollouts_per_step=2", "rl.roc.drop_zero_variance=false"]  # always an update
    return train_command(name, settings, *extra)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # three runs of Ray, 2 ranks and 2 actors on a busy 2-core machine
def test_killed_distributed_run_resumes_like_an_uninterrupted_one(tmp_path, local_ray):
    local_ray.shutdown()  # the runs start their own local clusters
    data = write_problems(tmp_path / "rl.jsonl", split_tasks(seed=0, sft=1, rl=1, heldout=12).heldout)
    runs = tmp_path / "runs"
    env = run_env()
    whole = subprocess.run(command(runs, data, "whole"), env=env, capture_output=True, text=True,
                           timeout=3000)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = subprocess.Popen(command(runs, data, "killed"), env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = runs / "killed" / "checkpoints" / "step_00000002"
    deadline = time.time() + 3000
    while not checkpoint.exists() and killed.poll() is None and time.time() < deadline:
        time.sleep(1)
    kill_group(killed)
    assert checkpoint.exists()
    resumed = subprocess.run(command(runs, data, "killed", "--resume"), env=env,
                             capture_output=True, text=True, timeout=3000)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout
    rows = {name: read_metrics(runs / name) for name in ("whole", "killed")}
    assert [r["step"] for r in rows["whole"]] == [1, 2, 3]
    assert [r["step"] for r in rows["killed"]][-1] == 3 and [r["step"] for r in rows["killed"]].count(3) == 1
    third = {name: next(r for r in rows[name] if r["step"] == 3) for name in rows}
    assert third["killed"]["train/lr"] == third["whole"]["train/lr"]
    assert step_problems(runs / "killed", 3) == step_problems(runs / "whole", 3)
    for name in rows:  # the exported plain model directories
        assert (runs / name / "final" / "config.json").is_file()
