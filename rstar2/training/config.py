"""The sections of a run config that belong to training itself, whatever the algorithm.

    model:  ModelConfig (with LoraConfig)     optimizer: OptimizerConfig (AdamW and its schedule)
    checkpoint: CheckpointConfig              logging: LoggingConfig

An RL run's tree holds them as ``model``, ``rl.optimizer``, ``checkpoint`` and ``logging``
(``rstar2.run.config``). An SFT run's holds ``checkpoint`` and ``logging`` as they are, and
its own ``model`` and ``train`` sections, which become a ``ModelConfig`` for the policy loader
and an ``OptimizerConfig`` for the optimizer (``rstar2.sft``). Each is a ``Section``: a pydantic
model whose fields carry their documentation as the docstring under them, unknown keys refused.
Defaults are the paper's values (§4.3), so a recipe states what differs. This module does not
import torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rstar2.models.device import DeviceSetting
from rstar2.section import Section


class LoraConfig(Section):
    rank: int = Field(16, ge=1)
    """LoRA rank r of every adapted matrix."""
    alpha: float = Field(32.0, gt=0)
    """LoRA scaling numerator; the update is scaled by alpha / rank."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapter input during training."""
    target_modules: tuple[str, ...] = (
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
    )
    """Names of the linear layers that get adapters (Llama/Qwen naming)."""


class ModelConfig(Section):
    path: str = "default"
    """The policy's starting weights: 'default' (the embedded SmolLM2-135M-Instruct), a .gguf
    file, a local transformers model directory, or a Hugging Face hub id such as
    'Qwen/Qwen3-1.7B' ('@REVISION' pins one), resolved into the standard HF cache (see
    ``rstar2.models.loading``)."""
    device: DeviceSetting = "auto"
    """Where the policy is trained: 'auto' (cuda when a GPU is available, else cpu), 'cpu',
    'cuda' or 'cuda:N'. Batches are built on it, and the embedded engine samples on it unless
    ``engine.device`` says otherwise."""
    dtype: Literal["float32", "bfloat16"] = "bfloat16"
    """Dtype of the trained weights (and of AdamW's updates to them: keep float32 on CPU, where
    an update of size lr is lost in bfloat16's 8-bit mantissa)."""
    compute_dtype: Literal["float32", "bfloat16", "auto"] = "float32"
    """Dtype of the forward and backward matmuls (``torch.autocast``). 'bfloat16' over float32
    weights is mixed precision: faster on CPUs with bfloat16 instructions (AVX-512-bf16, AMX;
    docs/benchmarks.md), while the weights and their updates stay float32; on CPUs without
    them it is several times slower. 'auto' decides at start from the CPU's instructions, or a
    probe of a second where they do not settle it (``rstar2.models.dtype_choice``); the run
    prints the choice and its config.yaml records it."""
    lora: LoraConfig | None = None
    """Train LoRA adapters instead of all weights (peft); null trains everything."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory (as the release does at 14B)."""


class OptimizerConfig(Section):
    lr: float = Field(1e-6, gt=0)
    """AdamW learning rate after warm-up, kept or decayed as ``schedule`` says (paper: 1e-6)."""
    warmup_steps: int = Field(20, ge=0)
    """Linear warm-up length in optimizer updates, which are rollout steps while
    ``rl.updates_per_step`` is 1 (paper: 20)."""
    schedule: Literal["constant", "cosine"] = "constant"
    """After warm-up: 'constant' keeps ``lr`` (the paper's); 'cosine' decays it along half a
    cosine to ``lr`` x ``min_lr_ratio`` at the run's last update (``rl.steps`` x
    ``rl.updates_per_step``), the schedule TRL and verl offer. A resumed run continues the
    curve where it stopped. The count starts with the schedule: a stage that
    continues another's (``init.reset_optimizer`` false) counts that stage's updates too, so a
    cosine stage should start its own (``init.reset_optimizer`` true)."""
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    """With ``schedule`` cosine: the share of ``lr`` the last update uses (0 decays to zero)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW moment decay rates."""
    eps: float = Field(1e-8, gt=0)
    """AdamW denominator epsilon."""
    weight_decay: float = Field(0.01, ge=0)
    """AdamW decoupled weight decay (verl's default, which the release uses)."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradients are clipped to this global L2 norm before each optimizer step."""


class CheckpointConfig(Section):
    every_steps: int | None = Field(1, ge=1)
    """Write a checkpoint after every this many steps (1 loses at most the current step). None:
    by time alone (every_minutes)."""
    every_minutes: float | None = Field(None, gt=0)
    """Also write one after the first step that ends every_minutes or more after the last
    checkpoint (or the run's start): how much work a crash may cost, whatever a step takes. A
    small model's checkpoint (weights and AdamW moments) can take longer to write than its step
    to run."""
    keep_last: int = Field(2, ge=1)
    """How many complete checkpoints to keep; older ones are deleted after a new one lands."""
    last: bool = True
    """Also write one after the run's last step (what ``--resume`` with more steps, and an RL
    recipe's ``rl.init.checkpoint``, start from). Off where the model goes on in the same
    process and its final folder is all a later run needs (the demo's SFT)."""

    @model_validator(mode="after")
    def _some_schedule(self) -> CheckpointConfig:
        if self.every_steps is None and self.every_minutes is None:
            raise ValueError("checkpoint: set every_steps, every_minutes or both (the last step is "
                             "saved too unless last is false)")
        return self

    def due(self, step: int, last_step: int, since_last_s: float) -> bool:
        """Whether to checkpoint after ``step`` (the run's last, ``last_step``, is with ``last``),
        the previous checkpoint (or the start) having been ``since_last_s`` seconds ago."""
        return ((self.last and step == last_step)
                or (self.every_steps is not None and step % self.every_steps == 0)
                or (self.every_minutes is not None and since_last_s >= 60 * self.every_minutes))


class LoggingConfig(Section):
    rollouts_per_step: int = Field(4, ge=0)
    """Prompt groups per step whose trajectories and RoC decisions go to rollouts/step_N.jsonl."""
    tensorboard: bool = False
    """Also write TensorBoard event files (needs the tensorboard package)."""
    wandb_project: str | None = None
    """Also log to this Weights & Biases project (needs wandb and a login)."""
