"""The embedded engine's settings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rstar2.models.device import DEVICE_HELP, DeviceSetting


class HFEngineConfig(BaseModel):
    """The embedded engine's settings."""

    model: str = Field("default", description="'default' (SmolLM2-135M-Instruct), a .gguf file, "
                       "a local model directory or a Hugging Face hub id.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "bfloat16", description="Weights and KV dtype. bfloat16 is the faster on CPUs with "
        "bfloat16 instructions (docs/benchmarks.md); float32 for exact log-probs.")
    device: DeviceSetting = Field("auto", description="Where the model runs: "
                        + DEVICE_HELP + " Ignored when a model object is passed in (its own).")
    max_batch_size: int = Field(32, ge=1, description="Most sequences decoded together.")
    max_parked: int = Field(32, ge=0, description="Finished sequences kept for reuse by the "
                            "next turn of their rollout.")
    min_shared_prefix: int = Field(32, ge=1, description="Shortest common prefix of waiting "
                                   "prompts worth computing once as a shared block.")
    max_blocks: int = Field(8, ge=1, description="Shared prefix blocks kept (LRU).")
    prefill_tokens: int = Field(4096, ge=64, description="Padded tokens per prefill pass "
                                "(bounds prefill memory).")
    seed: int = Field(0, description="Seed of the sampling generator.")
    kv_budget_tokens: int | None = Field(None, ge=1, description="KV tokens the running "
                                         "requests may hold: a request is admitted only when its "
                                         "prompt plus max_tokens fits beside theirs, else it "
                                         "waits (never preempted). None: max_batch_size times "
                                         "the model's context.")
    attention: Literal["auto", "cascade", "flat"] = Field(
        "auto", description="'cascade': sequences read shared prefix blocks in place (CPU only); "
        "'flat': each slot holds a copy of its block and a decode step is one fixed-shape fused "
        "attention pass per layer (engines.bucketed); 'auto': cascade on CPU, flat on GPU.")
    decode_kernels: bool = Field(True, description="On a CPU: decode with rstar2's fused C++ "
                                 "kernels (built for this machine on first use; Llama, Qwen2 and "
                                 "Qwen3 models), else with the model's own forward pass, which is "
                                 "also what runs where the kernels cannot be built.")
    cuda_graphs: bool = Field(True, description="With flat attention on CUDA: replay decode "
                              "steps as CUDA graphs captured per batch and length bucket.")

    @property
    def slots(self) -> int:
        """Slots the engine's table may fill: the sequences decoding and the parked ones."""
        return self.max_batch_size + self.max_parked
