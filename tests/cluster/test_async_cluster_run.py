"""An asynchronous run on a real local Ray cluster (CPU), as a user starts it: ``rstar2 train
recipes/cpu-cluster.yaml --set rl.asynchronous.enabled=true`` places 2 FSDP2 learner ranks, two
engine actors and a sandbox service; one engine actor is SIGKILLed after the first step. The
run finishes, and every step is logged once, with the problems the synchronous run would train
on at that step and each group with all its rollouts: none lost, none counted twice."""

import json
import os
import signal
import subprocess
import time

import pytest

from rstar2.data.problems import read_problems
from rstar2.rl.prompt_order import PromptOrder
from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.training.runlog import read_metrics
from tests.cluster.cluster_runs import REPO, kill_group, run_env, train_command

STEPS = 3
PROMPTS, GROUP = 2, 2
RUN_TIMEOUT_S = 600


def engine_actor_pids() -> list[int]:
    import psutil

    return sorted(p.pid for p in psutil.process_iter(["cmdline"])
                  if any("EngineActor" in part for part in (p.info["cmdline"] or [])))


@pytest.mark.timeout(900)
def test_an_asynchronous_run_survives_a_killed_engine_actor(tmp_path, tiny_models, local_ray):
    data = write_problems(tmp_path / "rl.jsonl", split_tasks(seed=0, sft=1, rl=1, heldout=6).heldout)
    runs = tmp_path / "runs"
    sets = [f"runs_dir={runs}", f"data.train={data}", f"model.path={tiny_models['qwen3']}",
            f"rl.steps={STEPS}", f"rl.prompts_per_step={PROMPTS}", f"rl.group_size={GROUP}",
            "rollout.max_response_tokens=16", "rollout.max_turns=1", f"logging.rollouts_per_step={PROMPTS}",
            "rl.roc.drop_zero_variance=false", "rl.asynchronous.enabled=true", "rl.asynchronous.max_staleness=1",
            "cluster.engines.members=2", "cluster.learner.ranks=1", "cluster.sandbox.workers_per_service=1"]
    address = local_ray.get_runtime_context().gcs_address
    with (tmp_path / "run.log").open("w") as log:
        run = subprocess.Popen(train_command("async", sets), env=run_env(address), cwd=REPO,
                               start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        metrics = runs / "async" / "metrics.jsonl"
        while run.poll() is None and time.monotonic() < deadline and not (
                metrics.exists() and metrics.read_text().strip()):
            time.sleep(0.2)
        actors = engine_actor_pids()
        assert len(actors) == 2, (actors, (tmp_path / "run.log").read_text()[-3000:])
        os.kill(actors[0], signal.SIGKILL)
        run.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        kill_group(run)
    output = (tmp_path / "run.log").read_text()
    assert run.returncode == 0, output[-3000:]
    rows = read_metrics(runs / "async")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert all(r["async/staleness_max"] <= 1 for r in rows if "async/staleness_max" in r)
    problems = read_problems(data)
    order = PromptOrder(len(problems), seed=0)
    for step in range(1, STEPS + 1):
        logged = [json.loads(line) for line in (runs / "async" / "rollouts" / f"step_{step}.jsonl").open()]
        expected = sorted(problems[i].id for i in order.next_batch(PROMPTS))
        assert sorted({r["problem_id"] for r in logged}) == expected
        per_group = sorted((r["group"], r["rollout"]) for r in logged)
        assert per_group == [(g, k) for g in range(PROMPTS) for k in range(2 * GROUP)]
