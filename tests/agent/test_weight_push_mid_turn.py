"""A weight push in the middle of a turn (asynchronous training): an aborted turn is continued
from where it stopped, a kept one goes on; either way the trajectory says which weights
sampled each token."""

import asyncio

import pytest

from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.engines.hf import HFEngine, HFEngineConfig
from tests.engines.test_fused_decode import kernel_sized_model
from tests.polling import until

BUDGET = 80


@pytest.mark.parametrize("mode", ["abort", "keep"])
def test_a_push_mid_turn_leaves_one_whole_turn_with_both_versions(mode):
    model, tokenizer = kernel_sized_model("llama", seed=0)
    newer = kernel_sized_model("llama", seed=1)[0].state_dict()
    engine = HFEngine(HFEngineConfig(dtype="float32"), model=model, tokenizer=tokenizer)
    agent = Agent(engine, tokenizer, None, RolloutConfig(prompt="no_tools", temperature=1.0, max_turns=1,
                                                          max_response_tokens=BUDGET))

    async def run():
        await engine.update_weights({}, version=0)
        rollout = asyncio.ensure_future(agent.rollout("Count to a hundred.", seed=7))
        await until(lambda: engine.table.n_active == 1 and len(engine.table.active[0].out_ids) >= 10,
                    what="the turn decoding")
        await engine.pause(mode)
        await engine.update_weights(newer, version=1)
        await engine.resume()
        return await rollout

    try:
        trajectory = asyncio.run(run())
    finally:
        engine.shutdown()
    n = len(trajectory.response_ids)
    assert n == BUDGET and trajectory.stop_reason == "max_tokens"
    assert [t.role for t in trajectory.turns] == ["assistant"]
    assert trajectory.loss_mask == [1] * n and all(lp < 0 for lp in trajectory.logprobs)
    versions = trajectory.token_versions
    switch = versions.index(1)
    assert switch >= 10 and versions == [0] * switch + [1] * (n - switch)
    assert trajectory.weight_version == 0
