"""A fleet of two engine actors on a real local Ray cluster (CPU): a killed actor's trajectories
run again on the other, and the actor is replaced with the fleet's last weights."""

import asyncio
import json
import os
import signal
import time

import pytest

from rstar2.data.problems import read_problems
from rstar2.engines.base import SamplingParams
from rstar2.fleet import Fleet
from rstar2.models.loading import load_tokenizer
from rstar2.reward import Grader
from rstar2.sandbox import SandboxClient
from rstar2.training.policy import load_policy
from tests.rl.test_trainer import local_trainer, make_config, rl_data  # noqa: F401  (fixture)

ray = pytest.importorskip("ray", reason="the Ray tests need the 'ray' extra (scripts/setup.sh)")
from rstar2.fleet.ray_member import RayMember  # noqa: E402

SETTINGS = {"dtype": "bfloat16", "kv_budget_tokens": 1600, "max_batch_size": 8}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


async def wait_replaced(fleet: Fleet, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while fleet.replaced == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.5)


@pytest.mark.slow  # CI kills an engine actor in a whole asynchronous run (tests/cluster/test_async_cluster_run.py)
def test_a_killed_actor_is_replaced_and_its_work_reruns(cluster):  # and replaces one (tests/cluster/test_weight_sync.py)
    async def run():
        members = [RayMember(SETTINGS, name=f"actor{i}") for i in range(2)]
        fleet = Fleet(members, "kv_aware", poll_s=0.1)
        try:
            params = SamplingParams(max_tokens=4, stop_token_ids=())
            await asyncio.gather(*(fleet.generate([[1, 2, 3]], params) for _ in range(2)))
            old_pid = await members[0].pid()
            os.kill(old_pid, signal.SIGKILL)
            outs = await asyncio.gather(*(fleet.generate([[1, 2, 3]], params) for _ in range(4)))
            await wait_replaced(fleet)
            new_pid = await members[0].pid()
            load = await members[0].load()
            return fleet.reruns, fleet.replaced, old_pid, new_pid, outs, load
        finally:
            await fleet.close()

    reruns, replaced, old_pid, new_pid, outs, load = asyncio.run(run())
    assert [len(o[0].token_ids) for o in outs] == [4] * 4  # every request answered once
    assert replaced == 1 and new_pid != old_pid and load.kv_capacity_tokens == 1600
    assert reruns >= 1


@pytest.mark.slow
def test_a_step_on_two_actors_survives_a_killed_actor(cluster, tmp_path, rl_data, sandbox_url):  # noqa: F811
    config = make_config(tmp_path, rl_data, steps=1, prompts_per_step=1, group_size=2, max_tokens=24)
    model = load_policy(config.model)
    tokenizer = load_tokenizer(config.model.path)

    async def run():
        members = [RayMember(SETTINGS, name=f"actor{i}") for i in range(2)]
        fleet = Fleet(members, "kv_aware", poll_s=0.1)
        try:
            with Grader(workers=1) as grader:
                async with SandboxClient([sandbox_url]) as sandbox:
                    trainer = local_trainer(config, model, fleet, sandbox, grader,
                                            read_problems(config.data.train), tokenizer)
                    trainer.restore(resume=False)
                    os.kill(await members[1].pid(), signal.SIGKILL)
                    await trainer.run()
            await wait_replaced(fleet)
            return fleet.reruns, fleet.replaced
        finally:
            await fleet.close()

    reruns, replaced = asyncio.run(run())
    rows = [json.loads(line) for line in (config.run_dir / "rollouts" / "step_1.jsonl").open()]
    assert len(rows) == 4 and replaced == 1
