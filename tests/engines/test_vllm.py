"""VLLMEngine on a real GPU with the default model (skipped without CUDA and vLLM)."""

import asyncio
import importlib.util

import pytest
import torch

from rstar2.engines.base import SamplingParams
from rstar2.engines.loading import resolve_model_dir

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
