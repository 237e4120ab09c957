"""The configuration of an SFT run (``rstar2 sft RECIPE.yaml``): one tree of pydantic sections,
read from YAML with dotted overrides exactly as ``rstar2 train`` reads its recipes.

    config = load_sft_config("recipes/qwen3-1.7b-sft.yaml", ["train.epochs=2"])

Sections: ``model`` (the starting weights), ``data`` (the conversations, ``rstar2.sft.chat``),
``agent`` (the prompt conversations are asked with and the rollout limits the trained model's
card records), ``train`` (``SFTSettings``: epochs, batch, learning rate, micro-batches,
compute dtype), ``checkpoint`` and ``logging`` (an RL run's sections too,
``rstar2.training.config``). Bad input raises ``ConfigError`` naming each bad field by its dotted
path. Reading a recipe imports no torch: ``rstar2.sft.train`` imports this module, not the
reverse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field

from rstar2.agent.card import ModelCard, new_card
from rstar2.agent.prompt import DEFAULT_TOOL_NAME, PromptConfig
from rstar2.models.device import DeviceSetting
from rstar2.recipe import read_recipe, validate_tree
from rstar2.section import Section
from rstar2.training.config import CheckpointConfig, LoggingConfig, LoraConfig, ModelConfig


class SFTModelConfig(Section):
    path: str = "default"
    """The starting weights: 'default' (the embedded SmolLM2-135M-Instruct), a .gguf file, a
    local model directory or a Hugging Face hub id ('Qwen/Qwen3-1.7B-Base', '@REVISION' pins
    one), as everywhere."""
    device: DeviceSetting = "auto"
    """Where it trains: 'auto' (cuda when a GPU is available, else cpu), 'cpu', 'cuda', 'cuda:N'."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Dtype of the trained weights and of AdamW's updates (the compute dtype is
    ``train.compute_dtype``)."""
    lora: LoraConfig | None = None
    """Train LoRA adapters instead of all weights; the saved model has them merged."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""

    def policy(self) -> ModelConfig:
        """These settings as a ``ModelConfig``, what ``rstar2.training.policy.load_policy`` takes."""
        return ModelConfig(path=self.path, device=self.device, dtype=self.dtype, lora=self.lora,
                           gradient_checkpointing=self.gradient_checkpointing)


class SFTDataConfig(Section):
    train: str
    """Chat-format JSONL of tool-use conversations (``rstar2.sft.chat``; docs/sft.md)."""
    max_tokens: int = Field(8192, ge=16)
    """Conversations longer than this (prompt and response tokens) are left out and counted."""


class AgentFormat(Section):
    prompt: Literal["rstar2", "short"] = "rstar2"
    """The prompt a conversation without a system message is asked with: the paper's
    ('rstar2') or its short form ('short', the CPU demo's); recorded in the model's card so
    that chat, eval and RL ask it the same way."""
    tool_name: str = DEFAULT_TOOL_NAME
    """The Python tool's name in the prompt's tool block."""
    max_response_tokens: int = Field(8192, ge=1)
    """The rollout budget the card records (what chat and eval use by default)."""
    max_turns: int = Field(10, ge=1)
    """The assistant turns the card records."""

    @property
    def prompt_config(self) -> PromptConfig:
        return PromptConfig(variant=self.prompt, tool_name=self.tool_name)


class SFTSettings(BaseModel):
    """What ``rstar2.sft.train`` trains with: epochs and batches, AdamW and its schedule, packing,
    compute dtype. Here, free of torch, since the recipe's ``train`` section is this model."""

    epochs: int = Field(1, ge=1, description="Passes over the traces.")
    batch_size: int = Field(8, ge=1, description="Traces per optimizer step.")
    lr: float = Field(2e-4, gt=0, description="AdamW learning rate after warm-up.")
    warmup_steps: int = Field(5, ge=0, description="Linear warm-up, in optimizer steps.")
    schedule: Literal["constant", "cosine"] = Field(
        "constant", description="After warm-up: 'constant' keeps lr; 'cosine' decays it along half "
        "a cosine to lr x min_lr_ratio at the last optimizer step (as rl.optimizer.schedule).")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="With schedule cosine: the share of lr "
                                "the last step uses.")
    micro_batch_tokens: int = Field(2048, ge=1, description="Most tokens per forward pass: traces "
                                    "packed end to end (a longer trace gets a pass of its own).")
    seed: int = Field(0, description="Seeds the order of traces in each epoch.")
    compute_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="'bfloat16': mixed precision (autocast) over the float32 weights, as "
        "the trainer's model.compute_dtype; 'auto': bfloat16 on a GPU that supports it and on a "
        "CPU that computes in it, float32 where it would be emulated (decided at start, printed).")
    freeze_embeddings: bool = Field(False, description="Keep the token embeddings (and a head "
                                    "tied to them) fixed.")


class SFTTraining(SFTSettings):
    """``SFTSettings`` as a recipe section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SFTConfig(Section):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """Run name; everything the run writes goes to ``<runs_dir>/<name>/``."""
    runs_dir: str = "runs"
    """Parent directory of run folders."""
    model: SFTModelConfig = SFTModelConfig()
    """The model to fine-tune."""
    data: SFTDataConfig
    """The conversations."""
    agent: AgentFormat = AgentFormat()
    """The prompt and rollout limits the model is trained for (its card)."""
    train: SFTTraining = SFTTraining()
    """Epochs, batch, learning rate, micro-batches, compute dtype, order seed."""
    checkpoint: CheckpointConfig = CheckpointConfig(every_steps=50)
    """Checkpoints every this many optimizer steps and at the last (``--resume`` continues; an RL
    recipe's ``rl.init.checkpoint`` can start from the last)."""
    logging: LoggingConfig = LoggingConfig()
    """Metrics (``metrics.jsonl``; TensorBoard, Weights & Biases when asked for)."""

    @property
    def run_dir(self) -> Path:
        return Path(self.runs_dir) / self.name

    def card(self, trained_by: str) -> ModelCard:
        """The card of the model this run writes."""
        return new_card(self.agent.prompt_config, self.agent.max_response_tokens, self.agent.max_turns,
                        trained_by)


def load_sft_config(path: str | Path, overrides: Iterable[str] = ()) -> SFTConfig:
    """Read a YAML SFT recipe, apply ``KEY=VALUE`` dotted overrides, validate (``ConfigError``)."""
    return validate_tree(SFTConfig, read_recipe(path, overrides), source=str(path))
