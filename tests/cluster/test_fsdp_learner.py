"""The FSDP2 learner over 2 gloo ranks (Ray actors) against the single-process learner, on the
real default model (and tiny random ones) and the same batch; its sharded checkpoint restored
and exported.

Tolerance: the two sum the same micro-batch gradients in a different order (per rank, then
across ranks), so gradients differ in float32 rounding (~1e-7 relative). AdamW's first step
moves each weight by lr * m / (sqrt(v) + eps), about lr * sign(g), which is insensitive to such
rounding, so the updated weights must agree to within 1% of the learning rate, while every
weight matrix moved by about the learning rate. The single-process learner runs on one thread,
as each rank does: matrix products on two threads round differently, by more than AdamW's
epsilon on the few hundred weights whose gradient is that small. The gradient norm is a float32
sum of squares over 135M elements taken per shard and then across ranks, so it agrees to 1e-4
relative."""

import asyncio

import pytest
import torch

pytest.importorskip("ray", reason="the distributed learner needs the [ray] extra (scripts/setup.sh)")

from rstar2.cluster.learner import DistributedLearner  # noqa: E402
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.rl.learner import Learner, LocalLearner
from rstar2.run.recipe import validate_config
from rstar2.run.settings import cluster_job, learner_settings
from rstar2.training.batch import TrainSequence
from rstar2.training.policy import load_policy

LR = 1e-4


@pytest.fixture
def config(tmp_path):
    return validate_config({
        "name": "fsdp", "runs_dir": str(tmp_path), "seed": 3,
        "model": {"dtype": "float32", "compute_dtype": "float32"},
        "data": {"train": "unused.jsonl"},
        "rl": {"steps": 4, "prompts_per_step": 1, "group_size": 2, "micro_batch_tokens": 40,
               "optimizer": {"lr": LR, "warmup_steps": 0}},
        "cluster": {"nodes": 1, "cpus_per_node": 4, "learner": {"ranks": 2}, "weight_sync": "gather",
                    "sandbox": {"services_per_node": 0}},
    })


def distributed(config, engine, tokenizer) -> DistributedLearner:
    """The run's distributed learner over ``engine``, with the sections the run hands it."""
    return DistributedLearner(cluster_job(config), learner_settings(config), engine)


def batch(tokenizer):
    """Rollouts of two prompts, of different lengths so that they form 3 micro-batches of at
    most 40 tokens (one rank gets two, the other one plus a weight-0 pass)."""
    rows = []
    for prompt, responses in (("What is 2 + 3?", [" The answer is 5.", " It is 6, I think."]),
                              ("Add 10 and 7.", [" 17", " Seventeen, since 10 + 7 = 17."])):
        ids = tokenizer.encode(prompt)
        for k, text in enumerate(responses):
            response = tokenizer.encode(text)
            rows.append(TrainSequence(ids, response, [1] * len(response), [-1.0] * len(response),
                                      1.0 if k == 0 else -1.0))
    return rows


def of_family(config, family, tiny_models):
    """``config`` on the real default model ('smollm2-135m') or on a tiny random one."""
    if family == "smollm2-135m":
        return config
    return config.model_copy(update={"model": config.model.model_copy(
        update={"path": str(tiny_models[family])})})


def float32_engine(config) -> HFEngine:
    """The rollout engine of ``config``'s model, in float32 (its own copy of the weights)."""
    return HFEngine(HFEngineConfig(model=config.model.path, dtype="float32", max_batch_size=2))


@pytest.mark.parametrize("family", [pytest.param("smollm2-135m", marks=pytest.mark.slow), "qwen2", "qwen3"])
def test_two_gloo_ranks_update_like_one_process(family, config, tiny_models, local_ray):
    """On the real default model, and on a tiny random Qwen2.5 (q/k/v biases) and Qwen3
    (per-head q/k norms), whose layers FSDP2 shards the same way."""
    config = of_family(config, family, tiny_models)
    engine = float32_engine(config)
    tokenizer = engine.tokenizer
    model = load_policy(config.model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    local = LocalLearner(learner_settings(config), model, engine)
    assert not local.colocated
    data = batch(tokenizer)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank (a one-CPU Ray actor): the same kernels, the same rounding
    try:
        local_stats, local_norm = local.learn(data)
    finally:
        torch.set_num_threads(threads)

    learner = distributed(config, engine, tokenizer)
    try:
        assert isinstance(learner, Learner)
        stats, norm = learner.learn(data)
        drift = {k: v for k, v in stats.summary().items() if k.startswith("logprob_drift/")}
        assert drift == pytest.approx({k: local_stats.summary()[k] for k in drift}, rel=1e-4)
        assert drift["logprob_drift/mean"] > 0.1  # the batch's made-up log-probs
        sharded = learner.full_state_dict()
        # the engine receives exactly the gathered weights
        asyncio.run(learner.push_weights())
        assert all(torch.equal(engine.model.state_dict()[k], sharded[k]) for k in sharded)
    finally:
        learner.close()
        asyncio.run(engine.close())
    expected = model.state_dict()
    assert sharded.keys() == expected.keys()
    worst = max((sharded[k] - expected[k]).abs().max().item() for k in expected)
    assert worst < 0.01 * LR
    moved = [k for k in expected if k.endswith("proj.weight")
             and (expected[k] - before[k]).abs().mean().item() > 0.5 * LR]
    assert len(moved) == len([k for k in expected if k.endswith("proj.weight")])
    assert norm == pytest.approx(local_norm, rel=1e-4)
    assert stats.tokens == local_stats.tokens
    assert stats.summary()["loss/policy"] == pytest.approx(local_stats.summary()["loss/policy"],
                                                           rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("family", [pytest.param("smollm2-135m", marks=pytest.mark.slow), "qwen3"])
def test_sharded_checkpoint_resumes_exactly_and_exports(family, config, tiny_models, local_ray, tmp_path):
    """Two learners of two ranks, one after the other: the second restores the first's
    checkpoint (weights, AdamW's moments, the schedule) and exports. CI runs it on the tiny
    Qwen3, whose shards take the same path; the default model's is slow."""
    from rstar2.models.loading import load_model

    config = of_family(config, family, tiny_models)
    engine = float32_engine(config)
    tokenizer = engine.tokenizer
    data = batch(tokenizer)
    first = distributed(config, engine, tokenizer)
    try:
        first.learn(data)
        saved_at = first.save(1, {"epoch": 0, "index": 1})
        saved = first.full_state_dict()
        first.learn(data)
        continued = first.full_state_dict()
        lr = first.learning_rate()
    finally:
        first.close()
    assert (saved_at / "sharded").is_dir() and (saved_at / "state.json").is_file()
    second = distributed(config, engine, tokenizer)
    try:
        state = second.restore(resume=True)
        assert state.step == 1 and state.data_position == {"epoch": 0, "index": 1}
        restored = second.full_state_dict()
        assert all(torch.equal(restored[k], saved[k]) for k in saved)
        second.learn(data)  # AdamW's moments came back too: the same second update
        again = second.full_state_dict()
        assert all(torch.equal(again[k], continued[k]) for k in continued)
        assert second.learning_rate() == lr
        exported = second.export(tokenizer, tmp_path / "final")
    finally:
        second.close()
        asyncio.run(engine.close())
    plain = load_model(str(exported), dtype="float32").state_dict()
    assert all(torch.equal(plain[k], continued[k]) for k in plain)
