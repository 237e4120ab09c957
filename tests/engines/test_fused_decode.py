"""The engine's fused CPU decode step (``engines.hf.stack``) against each family's own forward
pass: the same greedy tokens and log-probs, shared blocks and parked turns included; bfloat16
no further from float32 than the model's own bfloat16 pass; new weights read; models it cannot
decode left to their forward pass, with the reason."""

import asyncio

import pytest
import torch

from rstar2.engines.base import SamplingParams
from rstar2.engines.cpu_kernels import KernelsUnavailable, decode_kernels
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.engines.hf.stack import DecodeStack
from tests.families import FAMILIES, family_config, family_tokenizer

try:
    decode_kernels()
except KernelsUnavailable as error:
    pytest.skip(f"no fused CPU kernels here: {error}", allow_module_level=True)

GREEDY = SamplingParams(temperature=0, max_tokens=24, stop_token_ids=())


def kernel_sized_model(family: str, seed: int = 0):
    """A random two-layer model of ``family`` whose heads the kernels take (head_dim 64, two
    query heads per KV head), float32."""
    from transformers import AutoModelForCausalLM

    tokenizer = family_tokenizer(family)
    config = family_config(family, tokenizer)
    config.hidden_size, config.num_attention_heads, config.num_key_value_heads = 256, 4, 2
    config.head_dim = 64
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    return model, tokenizer


def generate(engine, prompts, params=GREEDY):
    return asyncio.run(engine.generate(prompts, params))


def plain_logprobs(model, prompt, tokens):
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + tokens])).logits[0].double()
    logprobs = torch.log_softmax(logits, -1)
    return [logprobs[len(prompt) - 1 + i, t].item() for i, t in enumerate(tokens)]


def prompts_sharing_a_prefix(vocab: int, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    shared = torch.randint(10, vocab, (40,), generator=g).tolist()
    return [shared + torch.randint(10, vocab, (k,), generator=g).tolist() for k in (3, 9, 20)]


@pytest.mark.parametrize("family", FAMILIES)
def test_fused_steps_give_the_families_own_tokens_and_logprobs(family):
    model, tokenizer = kernel_sized_model(family)
    engine = HFEngine(HFEngineConfig(dtype="float32", min_shared_prefix=16), model=model, tokenizer=tokenizer)
    try:
        assert engine.compute.decode_path == "fused CPU kernels"
        prompts = prompts_sharing_a_prefix(model.config.vocab_size)
        outs = generate(engine, prompts)
        assert engine.table.blocks, "the shared prefix should be read as a block"
        for prompt, out in zip(prompts, outs):
            with torch.inference_mode():
                expected = model.generate(torch.tensor([prompt]), max_new_tokens=GREEDY.max_tokens,
                                          do_sample=False, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
            assert out.token_ids == expected[0, len(prompt):].tolist()
            assert out.logprobs == pytest.approx(plain_logprobs(model, prompt, out.token_ids), abs=1e-4)
        # the next turn of a rollout resumes its parked slot and decodes on from there
        follow = prompts[1] + outs[1].token_ids + [11, 12, 13]
        (more,) = generate(engine, [follow])
        assert more.logprobs == pytest.approx(plain_logprobs(model, follow, more.token_ids), abs=1e-4)
    finally:
        engine.shutdown()


def test_bfloat16_fused_steps_stay_as_close_to_float32_as_the_models_own_pass(hf_engine, tokenizer):
    """Each bfloat16 path's greedy log-probs against the float32 model's, on its own tokens."""
    reference = hf_engine.model  # the session's float32 SmolLM2
    prompts = [tokenizer.encode(q) for q in ("Question: what is 17 * 23? Answer step by step.\n",
                                             "Write a Python function that reverses a list.\n")]
    fused = HFEngine(HFEngineConfig(dtype="bfloat16"), tokenizer=tokenizer)
    plain = HFEngine(HFEngineConfig(dtype="bfloat16", decode_kernels=False), model=fused.model,
                     tokenizer=tokenizer)
    params = SamplingParams(temperature=0, max_tokens=48, stop_token_ids=())
    try:
        assert fused.compute.stack is not None and plain.compute.stack is None
        error = {}
        for name, engine in (("fused", fused), ("plain", plain)):
            diffs = []
            for prompt, out in zip(prompts, generate(engine, prompts, params)):
                truth = plain_logprobs(reference, prompt, out.token_ids)
                diffs += [abs(a - b) for a, b in zip(out.logprobs, truth)]
            error[name] = sum(diffs) / len(diffs)
        assert error["fused"] <= 1.5 * error["plain"] + 1e-3, error
    finally:
        fused.shutdown()
        plain.shutdown()


def test_new_weights_are_read_by_the_next_step():
    model, tokenizer = kernel_sized_model("llama", seed=0)
    other, _ = kernel_sized_model("llama", seed=1)
    engine = HFEngine(HFEngineConfig(dtype="float32"), model=model, tokenizer=tokenizer)
    try:
        prompt = prompts_sharing_a_prefix(model.config.vocab_size)[0]
        generate(engine, [prompt])
        asyncio.run(engine.update_weights(other.state_dict(), version=1))
        (out,) = generate(engine, [prompt])
        assert out.logprobs == pytest.approx(plain_logprobs(other, prompt, out.token_ids), abs=1e-4)
    finally:
        engine.shutdown()


def test_models_the_kernels_cannot_decode_keep_their_forward_pass(tiny_models):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_models["qwen3"])  # head_dim 32
    assert "head size 32" in DecodeStack.why_not(model)
    engine = HFEngine(HFEngineConfig(dtype="float32"), model=model,
                      tokenizer=family_tokenizer("qwen3"))
    try:
        assert engine.compute.stack is None
        assert "no fused kernels (head size 32" in engine.compute.decode_path
        (out,) = generate(engine, [[5, 6, 7, 8]])
        assert len(out.token_ids) == GREEDY.max_tokens
    finally:
        engine.shutdown()
    kernel_model, _ = kernel_sized_model("llama")
    from peft import LoraConfig, get_peft_model

    adapted = get_peft_model(kernel_model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert DecodeStack.why_not(adapted) is not None
    off = HFEngine(HFEngineConfig(dtype="float32", decode_kernels=False), model=kernel_model,
                   tokenizer=family_tokenizer("llama"))
    try:
        assert off.compute.stack is None and off.compute.decode_path == "the model's forward pass"
    finally:
        off.shutdown()
