"""The page over a folder the real trainer wrote (real model, sandbox, verifier): sampled
log-probs shade the tokens and the timeline draws when each logged rollout ran."""

from __future__ import annotations

import asyncio
import json

import pytest

from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.training.policy import load_policy
from tests.rl.test_trainer import make_config, train
from tests.view.conftest import off_the_loop, screenshot


@pytest.fixture
def rl_data(tmp_path):
    from rstar2.sft.dataset import split_tasks, write_problems

    return write_problems(tmp_path / "rl.jsonl", split_tasks(seed=0, sft=1, rl=1, heldout=20).heldout[:10])


@pytest.mark.slow
def test_a_real_training_step_on_the_page(page, viewer, tmp_path, rl_data, sandbox_url):
    config = make_config(tmp_path, rl_data, steps=1, prompts_per_step=1, group_size=2, max_tokens=24)
    model = load_policy(config.model)
    engine = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=4), model=model)
    try:
        off_the_loop(asyncio.run, train(config, model, engine, sandbox_url))
    finally:
        engine.shutdown()
    rows = [json.loads(line) for line in (config.run_dir / "rollouts" / "step_1.jsonl").open()]
    server = viewer(config.run_dir)
    page.goto(server.url)
    page.wait_for_selector("body[data-ready]", timeout=30_000)
    page.click("button[data-tab=rollouts]")
    page.click("tr.rollout-row >> nth=0")
    page.check("#shade")
    page.wait_for_selector("#trajectory .tokens")
    shaded = page.locator("#trajectory .tok:not(.forced)")
    assert shaded.count() == sum(lp is not None for _, lp in rows[0]["token_logprobs"]) > 0
    assert "log p = " in shaded.first.get_attribute("title")
    screenshot(page, "trainer-tokens")
    page.click("button[data-tab=timeline]")
    assert page.locator("#timeline rect.span").count() == 2 * len(rows)  # generating, then grading
    screenshot(page, "trainer-timeline")
