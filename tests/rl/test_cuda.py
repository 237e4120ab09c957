"""Training on a real GPU (skipped without one): the demo's SFT step and the trainer's step
with the policy on CUDA, batches on the policy's device, the drift metric reported."""

import asyncio

import pytest
import torch

from rstar2.agent.prompt import PromptConfig
from rstar2.demo.pipeline import DemoSettings
from rstar2.models.loading import load_tokenizer
from rstar2.rl.learner import LocalLearner
from rstar2.run.placement import rollout_engine
from rstar2.run.settings import learner_settings
from rstar2.sandbox import SandboxClient
from rstar2.sft.dataset import sft_traces, split_tasks
from rstar2.sft.train import as_sequence, resolve_sft_dtype, sft_train
from rstar2.training.config import ModelConfig
from rstar2.training.policy import load_policy
from rstar2.training.runlog import read_metrics
from tests.rl.test_trainer import make_config, rl_data, snapshot, train  # noqa: F401
from tests.rl.test_update import SEQUENCES  # token ids < 96: valid in SmolLM2's vocabulary

pytestmark = pytest.mark.gpu


def cuda_config(tmp_path, data, **engine):
    """The fast trainer test's run, with the policy on CUDA."""
    config = make_config(tmp_path, data, steps=1, prompts_per_step=1, group_size=2, max_tokens=24)
    return config.model_copy(update={
        "model": config.model.model_copy(update={"device": "cuda"}),
        "engine": config.engine.model_copy(update=engine),
    })


def on_cuda(model) -> bool:
    return all(p.device.type == "cuda" for p in model.parameters())


def test_the_demos_sft_step_on_cuda(sandbox_url):
    tokenizer = load_tokenizer("default")
    model = load_policy(ModelConfig(device="cuda", dtype="float32", compute_dtype="bfloat16"))

    async def make_traces():
        async with SandboxClient([sandbox_url]) as sandbox:
            tasks = split_tasks(seed=5, sft=16, rl=1, heldout=2).sft
            return await sft_traces(tasks, tokenizer, sandbox, PromptConfig(variant="short"))

    traces = asyncio.run(make_traces())
    settings, _ = resolve_sft_dtype(DemoSettings().sft.model_copy(update={"epochs": 2, "batch_size": 4}), model)
    before = snapshot(model)
    losses = sft_train(model, [as_sequence(t) for t in traces], settings)
    assert on_cuda(model) and all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-2:]) < sum(losses[:2])
    after = snapshot(model)
    assert any(not torch.equal(before[name], after[name]) for name in before)


def test_a_trainer_step_on_cuda(tmp_path, rl_data, sandbox_url):  # noqa: F811
    """A full step with the colocated engine on the GPU; then an update with a bfloat16 engine
    copy (as the demo runs), whose loss measures the drift of the engine's log-probs."""
    config = cuda_config(tmp_path, rl_data)
    tokenizer = load_tokenizer(config.model.path)
    model = load_policy(config.model)
    engine = rollout_engine(config, model, tokenizer)
    assert engine.device.type == "cuda" and engine.model is model
    try:
        asyncio.run(train(config, model, engine, sandbox_url))
    finally:
        engine.shutdown()
    (row,) = read_metrics(config.run_dir)
    assert 1 <= row["response/length_max"] <= 24 and on_cuda(model)  # where it stops is the model's

    config = cuda_config(tmp_path / "copy", rl_data, dtype="bfloat16")
    model = load_policy(config.model)
    engine = rollout_engine(config, model, tokenizer)
    assert engine.device.type == "cuda" and engine.model is not model
    try:
        learner = LocalLearner(learner_settings(config), model, engine)
        before = snapshot(model)
        stats, grad_norm = learner.learn(list(SEQUENCES))
    finally:
        engine.shutdown()
    assert stats is not None and grad_norm > 0 and on_cuda(model)
    assert 0 < stats.summary()["logprob_drift/mean"] <= stats.summary()["logprob_drift/max"]
    after = snapshot(model)
    assert any(not torch.equal(before[name], after[name]) for name in before)
