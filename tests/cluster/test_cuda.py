"""The FSDP2 learner on CUDA with NCCL (one rank per GPU, as many as the machine has, at most
2) and the weight sync to a Ray actor member; skipped without a GPU. The CUDA update must
match the CPU single-process one to within 5% of the learning rate: different kernels
(cuBLAS vs CPU BLAS) round differently, and AdamW's first step is about lr x sign(g), which
flips only where a gradient is near zero."""

import asyncio

import pytest
import torch

pytest.importorskip("ray", reason="the distributed learner needs the [ray] extra (scripts/setup.sh)")

from rstar2.fleet.rollout_engine import MemberSpec, open_fleet
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.rl.learner import LocalLearner
from rstar2.run.settings import learner_settings
from rstar2.training.policy import load_policy
from rstar2.weights.wire import checksum
from tests.cluster.test_fsdp_learner import LR, batch, config, distributed  # noqa: F401

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_nccl_learner_updates_like_the_cpu_learner_and_syncs(config, tokenizer, local_ray):  # noqa: F811
    gpus = min(torch.cuda.device_count(), 2)
    local_ray.shutdown()
    local_ray.init(num_cpus=4, num_gpus=gpus, include_dashboard=False, log_to_driver=False)
    config = config.model_copy(update={"cluster": config.cluster.model_copy(update={
        "gpus_per_node": gpus, "learner": config.cluster.learner.model_copy(update={"ranks": gpus})})})
    engine = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=2))
    model = load_policy(config.model)
    LocalLearner(learner_settings(config), model, engine).learn(batch(tokenizer))
    fleet = open_fleet([MemberSpec(ray=True)], "static", model="default", dtype="float32",
                       seed=0, tokenizer=tokenizer)
    learner = distributed(config, fleet, tokenizer)
    try:
        learner.learn(batch(tokenizer))
        weights = learner.full_state_dict()
        asyncio.run(learner.push_weights())
        assert asyncio.run(fleet.members[0].weights_checksum()) == checksum(weights)
    finally:
        learner.close()
        asyncio.run(fleet.close())
        asyncio.run(engine.close())
    expected = model.state_dict()
    assert max((weights[k] - expected[k]).abs().max().item() for k in expected) < 0.05 * LR
