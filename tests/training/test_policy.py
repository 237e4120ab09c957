"""The policy: LoRA trains only adapters (kept in float32), the embedded engine samples from the
adapted model, and a saved policy is a plain model directory with the same outputs."""

import asyncio

import pytest
import torch

from rstar2.engines.base import SamplingParams
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.models.loading import load_model
from rstar2.training.config import LoraConfig, ModelConfig
from rstar2.training.policy import load_policy, save_policy


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # peft's, not ours
def test_lora_policy_trains_adapters_only_and_saves_merged(tmp_path, tokenizer):
    model = load_policy(ModelConfig(dtype="float32", lora=LoraConfig(rank=4, alpha=8)))
    trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    assert {p.dtype for p in trainable.values()} == {torch.float32}
    with torch.no_grad():
        for name, p in trainable.items():
            if "lora_B" in name:
                p.normal_(std=0.05)  # a trained adapter (peft starts B at zero)
    ids = torch.tensor([tokenizer.encode("The sum of 12 and 30 is")])
    model.eval()
    with torch.no_grad():
        adapted = model(input_ids=ids).logits.float()

    engine = HFEngine(HFEngineConfig(dtype="float32"), model=model, tokenizer=tokenizer)
    try:
        params = SamplingParams(temperature=0.0, max_tokens=4, stop_token_ids=())
        (completion,) = asyncio.run(engine.generate([ids[0].tolist()], params))
    finally:
        engine.shutdown()
    assert completion.token_ids[0] == int(adapted[0, -1].argmax())  # the engine reads the adapters

    saved = load_model(save_policy(model, tokenizer, tmp_path / "final"), "float32")
    with torch.no_grad():
        merged = saved(input_ids=ids).logits.float()
    torch.testing.assert_close(merged, adapted, atol=1e-3, rtol=1e-3)
    assert (tmp_path / "final" / "tokenizer.json").is_file()
