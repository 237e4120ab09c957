"""LocalLearner on the real default model: a saved learner restores to the same weights,
optimizer, schedule and data position, and the next update from the restored one equals the
next update of the original (resume exactness); weight pushes reach an engine that holds its
own copy, and a colocated engine only drops its caches."""

import asyncio

import pytest
import torch

from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.rl.learner import Learner, LocalLearner
from rstar2.run.recipe import validate_config
from rstar2.run.settings import learner_settings
from rstar2.training.batch import TrainSequence
from rstar2.training.policy import load_policy


@pytest.fixture
def config(tmp_path):
    return validate_config({
        "name": "learner", "runs_dir": str(tmp_path), "seed": 3,
        "model": {"dtype": "float32"}, "data": {"train": "unused.jsonl"},
        "rl": {"steps": 4, "prompts_per_step": 1, "group_size": 2,
               "optimizer": {"lr": 1e-4, "warmup_steps": 4}},
    })


def sequences(engine):
    """Two rollouts of one prompt, one rewarded, scored by the engine's own sampler."""
    prompt = engine.tokenizer.encode("What is 2 + 3?")
    response = engine.tokenizer.encode(" The answer is 5.")
    other = engine.tokenizer.encode(" It is 6, I think.")
    return [TrainSequence(prompt, response, [1] * len(response), [-1.0] * len(response), 1.0),
            TrainSequence(prompt, other, [1] * len(other), [-1.0] * len(other), -1.0)]


def weights(model):
    return {name: p.detach().clone() for name, p in model.state_dict().items()}


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def learner_on(config):
    model = load_policy(config.model)
    engine = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=2), model=model)
    return LocalLearner(learner_settings(config), model, engine), engine


def test_save_then_restore_continues_exactly(config):
    learner, engine = learner_on(config)
    restored, restored_engine = learner_on(config)
    try:
        assert isinstance(learner, Learner) and learner.colocated
        data = sequences(engine)
        stats, grad_norm = learner.learn(data)
        assert stats is not None and grad_norm > 0
        learner.save(1, {"epoch": 0, "index": 1})
        assert learner.learn([]) == (None, None)
        learner.wait_saved()

        state = restored.restore(resume=True)
        assert (state.step, state.data_position) == (1, {"epoch": 0, "index": 1})
        assert same(weights(learner.model), weights(restored.model))
        assert restored.learning_rate() == learner.learning_rate() != config.rl.optimizer.lr
        learner.learn(data)
        restored.learn(data)
        assert same(weights(learner.model), weights(restored.model))
    finally:
        engine.shutdown()
        restored_engine.shutdown()


def test_a_fresh_run_restores_nothing(config):
    learner, engine = learner_on(config)
    try:
        assert learner.restore(resume=True) is None
    finally:
        engine.shutdown()


def test_push_weights_loads_a_separate_copy_and_only_clears_a_colocated_one(config):
    learner, colocated = learner_on(config)
    separate = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=2), tokenizer=colocated.tokenizer)
    copying = LocalLearner(learner_settings(config), learner.model, separate)
    try:
        assert not copying.colocated
        learner.learn(sequences(colocated))  # the policy moves away from the base weights
        assert not same(weights(learner.model), weights(separate.model))
        asyncio.run(copying.push_weights())
        assert same(weights(learner.model), weights(separate.model))
        asyncio.run(learner.push_weights())
        assert not learner.model.training and not colocated.table.residents
    finally:
        colocated.shutdown()
        separate.shutdown()
