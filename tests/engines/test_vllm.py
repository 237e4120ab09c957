"""VLLMEngine on a real GPU with the default model (skipped without CUDA and vLLM)."""

import asyncio
import importlib.util

import pytest
import torch

from rstar2.engines.base import SamplingParams
from rstar2.models.loading import resolve_model_dir

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm ([gpu] extra)"),
]


def test_vllm_engine_generates_token_ids_with_logprobs(tokenizer):
    from rstar2.engines.vllm import VLLMEngine

    engine = VLLMEngine(str(resolve_model_dir("default")), dtype="bfloat16",
                        gpu_memory_utilization=0.3, max_model_len=2048)
    prompt = tokenizer.encode("<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n")
    params = SamplingParams(temperature=0, max_tokens=16)
    try:
        [out] = asyncio.run(engine.generate([prompt], params))
    finally:
        asyncio.run(engine.close())
    assert 0 < len(out.token_ids) <= 16 and len(out.logprobs) == len(out.token_ids)
    assert all(lp <= 0 for lp in out.logprobs)
    assert out.finish_reason == ("stop" if len(out.token_ids) < 16 else "length")


def test_vllm_engine_reads_its_load_and_stamps_the_weight_version(tokenizer):
    """The KV gauges read in process, and a state dict through the worker extension (shared
    memory), stamped with a version; vLLM's own checksums of every worker."""
    from rstar2.engines.vllm import VLLMEngine
    from rstar2.models.loading import load_model

    engine = VLLMEngine(str(resolve_model_dir("default")), dtype="bfloat16",
                        gpu_memory_utilization=0.3, max_model_len=2048)
    prompt = tokenizer.encode("<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n")
    params = SamplingParams(temperature=0, max_tokens=8)
    state = load_model("default", dtype="bfloat16").state_dict()

    async def run():  # one event loop: vLLM's output handler lives in it
        try:
            [before] = await engine.generate([prompt], params)
            load = engine.load()
            digests = await engine.weight_digests()
            await engine.update_weights(state, version=7)
            [after] = await engine.generate([prompt], params)
            return before, load, after, digests, await engine.weight_digests()
        finally:
            await engine.close()

    before, load, after, digests, reloaded = asyncio.run(run())
    assert load.kv_capacity_tokens >= 2048 and load.running == 0
    assert before.weight_version is None and after.weight_version == 7
    assert after.token_ids == before.token_ids  # the same weights, loaded by name
    assert reloaded == digests and len(digests) == 1  # bitwise, in vLLM's own layout


def test_a_vllm_ray_member_is_placed_on_a_gpu_and_serves(tokenizer):
    ray = pytest.importorskip("ray")
    from rstar2.fleet.rollout_engine import MemberSpec, open_fleet

    ray.init(include_dashboard=False, log_to_driver=False)
    fleet = open_fleet([MemberSpec(kind="vllm", ray=True, gpus=1, max_batch_size=8,
                                   engine_args={"gpu_memory_utilization": 0.3, "max_model_len": 2048})],
                       "kv_aware", model="default", dtype="bfloat16", seed=0, tokenizer=tokenizer)
    prompt = tokenizer.encode("<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n")

    async def run():
        try:
            [load] = await fleet.loads()
            await fleet.update_weights({}, version=1)
            [out] = await fleet.generate([prompt], SamplingParams(temperature=0, max_tokens=8))
            return load, out
        finally:
            await fleet.close()

    try:
        load, out = asyncio.run(run())
    finally:
        ray.shutdown()
    assert load.kv_capacity_tokens >= 2048 and out.weight_version == 1 and out.token_ids
