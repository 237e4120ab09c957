"""A training step whose rollouts run on a fleet of two real HFEngines: in this process, behind
`serve-model`'s HTTP app, and with one member dying mid-step.

The step is the trainer's real one (real model, sandbox, verifier); the fleet is not colocated,
so the trainer pushes its weights to every member before sampling and after the update.
"""

import asyncio
import json

import pytest
import torch

from rstar2.data.problems import read_problems
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.fleet import Fleet, HTTPMember, LocalMember
from rstar2.models.loading import load_tokenizer
from rstar2.reward import Grader
from rstar2.run.placement import rollout_engine
from rstar2.run.recipe import ConfigError, validate_config
from rstar2.sandbox import SandboxClient
from rstar2.training.policy import load_policy
from rstar2.training.runlog import read_metrics
from tests.fleet.test_fleet import WEIGHTS_TOKEN, serve
from tests.rl.test_trainer import local_trainer, make_config, rl_data  # noqa: F401  (fixture)

ROLLOUTS = 4  # 1 prompt x 2G, G = 2


def member_engines(budget: int) -> list[HFEngine]:
    """Two engines over one bf16 copy of the weights (each pushed the trainer's weights)."""
    first = HFEngine(HFEngineConfig(dtype="bfloat16", kv_budget_tokens=budget, seed=1))
    second = HFEngine(HFEngineConfig(dtype="bfloat16", kv_budget_tokens=budget, seed=2),
                      model=first.model, tokenizer=first.tokenizer)
    torch.set_num_threads(1)
    return [first, second]


def one_step(tmp_path, data, sandbox_url, members, policy, tokenizer):
    config = make_config(tmp_path, data, steps=1, prompts_per_step=1, group_size=2, max_tokens=24)
    model = load_policy(config.model)

    async def run():
        fleet = Fleet(members, policy, poll_s=0.05)
        with Grader(workers=1) as grader:
            async with SandboxClient([sandbox_url]) as sandbox:
                trainer = local_trainer(config, model, fleet, sandbox, grader,
                                        read_problems(config.data.train), tokenizer)
                trainer.restore(resume=False)
                await trainer.run()
        return fleet, await fleet.loads()

    fleet, loads = asyncio.run(run())
    rows = [json.loads(line) for line in (config.run_dir / "rollouts" / "step_1.jsonl").open()]
    assert len(rows) == ROLLOUTS and len(read_metrics(config.run_dir)) == 1
    return fleet, loads


@pytest.mark.parametrize("policy", ["adaptive", "kv_aware", "static"])
def test_a_step_on_two_in_process_engines(tmp_path, rl_data, sandbox_url, policy):  # noqa: F811
    engines = member_engines(budget=2 * 400)
    try:
        fleet, loads = one_step(tmp_path, rl_data, sandbox_url,
                                [LocalMember(e, f"m{i}") for i, e in enumerate(engines)], policy,
                                engines[0].tokenizer)
    finally:
        for e in engines:
            e.shutdown()
    assert all(load.kv_peak_tokens > 0 for load in loads)  # both members sampled
    assert all(load.kv_peak_tokens <= load.kv_capacity_tokens for load in loads)
    assert fleet.reruns == 0


def test_a_member_dying_mid_step_loses_no_rollout(tmp_path, rl_data, sandbox_url):  # noqa: F811
    engines = member_engines(budget=4 * 400)

    class Dying(LocalMember):
        """Dies when the first turn of a trajectory admitted to it arrives (mid-step, with its
        share of the step's trajectories booked on it). Dying after answering instead would
        leave it to timing whether any trajectory still needs it."""

        async def generate(self, prompts, params):
            self.engine.shutdown()
            return await super().generate(prompts, params)

    try:
        fleet, loads = one_step(tmp_path, rl_data, sandbox_url,
                                [Dying(engines[0], "dying"), LocalMember(engines[1], "ok")],
                                "least_loaded", engines[0].tokenizer)
    finally:
        for e in engines:
            e.shutdown()
    assert fleet.reruns >= 1 and not fleet.scheduler.members[0].alive


@pytest.mark.parametrize("policy", ["adaptive", "least_loaded", "static"])
def test_a_step_on_two_serve_model_servers(tmp_path, rl_data, sandbox_url, policy):  # noqa: F811
    engines = member_engines(budget=2 * 400)
    try:
        with serve(engines, weights_dir=tmp_path) as (servers, urls):
            members = [HTTPMember(u, weights_dir=str(tmp_path), weights_token=WEIGHTS_TOKEN) for u in urls]
            fleet, loads = one_step(tmp_path, rl_data, sandbox_url, members, policy, engines[0].tokenizer)
    finally:
        for e in engines:
            e.shutdown()
    assert all(e.load().kv_peak_tokens > 0 for e in engines)
    assert [load.kv_capacity_tokens for load in loads] == [800, 800]


def test_a_recipe_with_members_builds_its_fleet_through_the_factory(tmp_path, rl_data):  # noqa: F811
    config = make_config(tmp_path, rl_data)
    engine = config.engine.model_dump() | {"scheduler": "static", "members": [
        {"kind": "openai", "base_url": "http://127.0.0.1:9"}, {"kv_budget_tokens": 900}]}
    config = validate_config(config.model_dump() | {"engine": engine})
    tokenizer = load_tokenizer(config.model.path)
    fleet = rollout_engine(config, model=None, tokenizer=tokenizer)
    try:
        assert isinstance(fleet, Fleet) and fleet.policy == "static"
        remote, local = fleet.members
        assert isinstance(remote, HTTPMember) and remote.server == "http://127.0.0.1:9"
        assert local.engine.load().kv_capacity_tokens == 900 and not fleet.samples_from(None)
    finally:
        asyncio.run(fleet.close())


@pytest.mark.parametrize("engine, message", [
    ({"scheduler": "fastest"}, "engine.scheduler: must be one of 'static', 'least_loaded', 'kv_aware', 'adaptive'"),
    ({"members": [{"kind": "openai"}]}, "engine.members.0: an 'openai' member needs base_url"),
    ({"members": [{"kind": "openai", "base_url": "http://h", "ray": True}]}, "only 'hf' and 'vllm' members"),
])
def test_bad_fleet_recipes_are_refused_naming_the_field(engine, message):
    with pytest.raises(ConfigError, match=message):
        validate_config({"name": "x", "data": {"train": "a"}, "rl": {"steps": 1}, "engine": engine})
