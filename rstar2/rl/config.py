"""The configuration of an RL run: one tree of pydantic models, YAML recipes, dotted overrides.

    config = load_config("recipes/qwen3-14b-stage1.yaml", ["rl.optimizer.lr=2e-6"])

The tree is ``RunConfig`` with one section per component (``model``, ``data``, ``rollout``,
``rl`` with its ``roc``/``loss``/``optimizer``/``init`` parts, ``checkpoint``, ``logging``); each
component is handed only its own section. Every field carries its documentation as the
docstring under it (also its pydantic ``description``). Defaults are the paper's values (§4.3),
so a recipe states what differs and what a reader should see at a glance.

Bad input raises ``ConfigError`` whose message names each bad field by its dotted path, e.g.
``recipes/x.yaml: rl.roc.mode: must be one of 'paper', 'release', 'off' (got 'sort')``, and
suggests the right path for a field put in the wrong place (``rl.lr`` -> ``rl.optimizer.lr``).
Recipes and override values are read as YAML with YAML 1.2 booleans (only true/false), so
``rl.roc.mode=off`` means the string 'off'. This module does not import torch.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from rstar2.cluster.config import ClusterConfig
from rstar2.engines.factory import ENGINE_KINDS, TRAINABLE_ENGINE_KINDS, EngineKind, MemberSpec
from rstar2.engines.fleet.policies import PolicyName
from rstar2.section import Section

from rstar2.engines.device import DeviceSetting


ModelT = TypeVar("ModelT", bound=BaseModel)


class RecipeLoader(yaml.SafeLoader):
    """YAML with YAML 1.2 booleans: only true/false, so ``mode: off`` stays the string 'off'."""


RecipeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class ConfigError(ValueError):
    """A recipe or override that does not describe a valid run; the message names the field."""


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
    ``rstar2.engines.loading``)."""
    device: DeviceSetting = "auto"
    """Where the policy is trained: 'auto' (cuda when a GPU is available, else cpu), 'cpu',
    'cuda' or 'cuda:N'. Batches are built on it, and the embedded engine samples on it unless
    ``rollout.engine_device`` says otherwise."""
    dtype: Literal["float32", "bfloat16"] = "bfloat16"
    """Dtype of the trained weights (and of AdamW's updates to them: keep float32 on CPU, where
    an update of size lr is lost in bfloat16's 8-bit mantissa)."""
    compute_dtype: Literal["float32", "bfloat16", "auto"] = "float32"
    """Dtype of the forward and backward matmuls (``torch.autocast``). 'bfloat16' over float32
    weights is mixed precision: faster on CPUs with bfloat16 instructions (AVX-512-bf16, AMX;
    docs/benchmarks.md), while the weights and their updates stay float32; on CPUs without
    them it is several times slower. 'auto' decides at start from the CPU's instructions, or a
    probe of a second where they do not settle it (``rstar2.engines.dtype_choice``); the run
    prints the choice and its config.yaml records it."""
    lora: LoraConfig | None = None
    """Train LoRA adapters instead of all weights (peft); null trains everything."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory (as the release does at 14B)."""


class DataConfig(Section):
    train: str
    """Training problems: a JSONL file, one object per line with ``id``, ``problem`` and an
    integer ``answer``, or a data set packaged with rstar2 by name ('gsm8k_train';
    ``rstar2 data list``)."""
    keep_ids: str | None = None
    """Optional text file with one problem id per line: only those problems are trained on.
    Stage 3 uses it for the hard subset (problems not solved 8/8 by the stage-2 policy)."""
    max_prompt_tokens: int = Field(2048, ge=1)
    """Problems whose prompt is longer than this are skipped (release: 2048)."""
    shuffle: bool = True
    """Draw the problems in a fresh seeded order each epoch; false takes them in file order
    (a curriculum, e.g. the GSM8K recipe's easiest-first RL set)."""


class RolloutConfig(Section):
    engine: EngineKind = "hf"
    """What generates rollouts, named as everywhere (``rstar2.engines.factory``): 'hf', the
    trainer's transformers model in this process (CPU or one GPU, colocated unless
    ``engine_dtype`` is set), or 'vllm', vLLM that receives the weights after each step.
    'openai' servers keep their own weights and cannot be trained. The old name 'embedded'
    is read as 'hf' with a warning."""
    engine_dtype: Literal["float32", "bfloat16", "auto"] | None = None
    """Embedded engine: null samples from the trainer's model itself (colocated, one copy of
    the weights); a dtype gives the engine its own copy in that dtype, loaded with the new
    weights after every update, and the trainer then recomputes the old log-probs. bfloat16
    samples faster than float32 on bfloat16-capable CPUs (docs/benchmarks.md). 'auto' decides
    at start, as ``model.compute_dtype`` does, for a decode step's shapes. Not with LoRA."""
    engine_device: DeviceSetting | None = None
    """Embedded engine with its own copy (``engine_dtype`` set): the device of that copy; null
    means the policy's (``model.device``). A colocated engine always runs on the policy's."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature of training rollouts (paper: 1.0)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus mass of training rollouts (1 = off; the paper does not state one)."""
    max_response_tokens: int = Field(8192, ge=1)
    """Budget of all tokens after the prompt, tool responses included; a rollout that reaches it
    is truncated and keeps reward 0 (no overlong filtering, §2.5)."""
    max_turns: int = Field(10, ge=1)
    """Most assistant turns per rollout (paper: 10 in stages 1-2, 15 in stage 3)."""
    prompt: Literal["rstar2", "short"] = "rstar2"
    """The agent's prompt: the paper's ('rstar2'), or the same tags and tool in a few lines
    ('short', the CPU demo's: a few lines instead of the tool block, fewer tokens per sequence)."""
    tool_timeout_s: float = Field(4.0, gt=0)
    """Wall-clock limit of one tool call (release: 4 s)."""
    sandbox_urls: tuple[str, ...] = ()
    """Sandbox services to run tool calls on; empty starts a private local one."""
    sandbox_workers: int = Field(2, ge=1)
    """Worker processes of the private local sandbox (unused when ``sandbox_urls`` is set)."""
    members: tuple[MemberSpec, ...] = ()
    """Engines of a rollout fleet (``docs/fleet.md``): empty samples from the one engine
    ``engine`` names; otherwise every rollout runs on one of these members (each with its own
    copy of the weights, pushed after every update), chosen by ``scheduler``. Each member:
    ``kind`` ('hf' | 'openai'), ``ray``, ``base_url``, ``kv_budget_tokens``,
    ``max_batch_size``, ``threads``."""
    scheduler: PolicyName = "kv_aware"
    """How a fleet hands out trajectories (pinned to one member for all their turns):
    'static' (dealt evenly up front), 'least_loaded' (to the member with the fewest in
    flight), 'kv_aware' (admitted when a member's free KV fits prompt + response budget,
    refilled as trajectories end; the paper's §3.2)."""

    @field_validator("engine", mode="before")
    @classmethod
    def engine_name(cls, value: Any) -> Any:
        """One engine vocabulary: 'embedded' is the old recipes' name for 'hf'; 'openai' is
        refused here, where the recipe is read, rather than after the model has loaded."""
        if value == "embedded":
            warnings.warn("rollout.engine: 'embedded' is now called 'hf' (the name eval and chat "
                          "use); please update the recipe", FutureWarning, stacklevel=2)
            return "hf"
        if value in ENGINE_KINDS and value not in TRAINABLE_ENGINE_KINDS:
            raise ValueError(f"engine {value!r} cannot be trained: a server keeps its own "
                             f"weights; use one of {', '.join(TRAINABLE_ENGINE_KINDS)}")
        return value


class RocConfig(Section):
    mode: Literal["paper", "release", "off"] = "paper"
    """How a prompt's rollouts become its training group (one class each in
    ``rstar2.rl.advantage``): 'paper' (§2.2.3: half the negatives uniformly, the rest positives
    drawn with weight 1/(p_total + eps)); 'release' (the official code rule for rule:
    proportional counts with a floor per side, positives sorted by penalty, negatives in rollout
    order, the release's format penalty and group-size rules); 'off' (plain GRPO: G rollouts are
    sampled and all kept)."""
    error_signal: Literal["outcome", "text"] = "outcome"
    """What p_err counts as a failed tool call. 'outcome' (default): the call's recorded outcome,
    so parse errors, exceptions, timeouts and kills all count, as the paper lists them. 'text':
    the release's rule, the share of ``<tool_response>`` blocks in the response text that contain
    'error' in any case (it misses a timeout or kill whose text lacks the word and counts output
    that prints it). ``mode: release`` with ``error_signal: text`` is the official run exactly."""
    penalty_epsilon: float = Field(0.1, gt=0)
    """eps in the paper-mode weight 1/(p_total + eps), which is undefined at p_total = 0. At 0.1 a
    flawless trace is 3.5x as likely per draw as one with a quarter of its calls failing, and the
    weights stay within 1/2.1 .. 10, so selection prefers quality without becoming a sort."""
    min_per_side: int = Field(2, ge=0)
    """Release mode: at least this many positives and negatives are kept when available (the
    release's ``min_zero_reward_trace_num`` and ``min_non_zero_reward_trace_num``, both 2)."""
    drop_zero_variance: bool = True
    """Drop a group whose rewards are all equal before selection (the release's
    ``reject_equal_reward``). Paper mode also drops a group whose kept rewards became all equal
    (a single negative keeps none), a check the release does not make. Dropped groups are
    counted in the step's metrics; the batch is not refilled."""


class LossConfig(Section):
    clip_low: float = Field(0.2, gt=0, lt=1)
    """PPO ratio clip below 1: the ratio is clipped at 1 - clip_low."""
    clip_high: float = Field(0.28, gt=0)
    """PPO ratio clip above 1 (Clip-Higher): the ratio is clipped at 1 + clip_high."""
    std_epsilon: float = Field(1e-6, gt=0)
    """Added to the group's reward std in the advantage (r - mean) / (std + eps), as verl."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of a k3 KL penalty to the reference policy; 0 (the paper) skips the reference."""
    entropy_coef: float = Field(0.0, ge=0)
    """Weight of an entropy bonus; 0 in the paper (it risks runaway entropy)."""


class OptimizerConfig(Section):
    lr: float = Field(1e-6, gt=0)
    """AdamW learning rate after warm-up; constant afterwards (paper: 1e-6)."""
    warmup_steps: int = Field(20, ge=0)
    """Linear warm-up length in rollout steps (paper: 20)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW moment decay rates."""
    eps: float = Field(1e-8, gt=0)
    """AdamW denominator epsilon."""
    weight_decay: float = Field(0.01, ge=0)
    """AdamW decoupled weight decay (verl's default, which the release uses)."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradients are clipped to this global L2 norm before each optimizer step."""


class InitConfig(Section):
    checkpoint: str | None = None
    """Start from this checkpoint (a ``step_*`` directory, or a run's checkpoint directory whose
    latest is taken), e.g. the previous stage's; null starts from ``model.path``."""
    reset_optimizer: bool = False
    """With ``checkpoint``: start AdamW and the warm-up afresh instead of continuing them
    (stage 3 does)."""
    reset_reference: bool = False
    """With ``checkpoint``: the KL reference becomes the loaded policy instead of ``model.path``
    (stage 3 does; only matters when ``loss.kl_coef`` > 0)."""


class RLConfig(Section):
    steps: int = Field(ge=1)
    """Rollout steps to train (one optimizer update per step unless ``updates_per_step`` > 1)."""
    prompts_per_step: int = Field(512, ge=1)
    """Prompts drawn per step (paper: 512)."""
    group_size: int = Field(16, ge=2)
    """G, rollouts per prompt that enter the update; RoC samples 2G and keeps G (paper: 16)."""
    updates_per_step: int = Field(1, ge=1)
    """Optimizer updates per rollout batch (mini-batches); 1, as the release, is on-policy."""
    micro_batch_tokens: int = Field(20480, ge=1)
    """Most tokens per forward/backward pass; sequences are packed up to this (release: 20480)."""
    roc: RocConfig = RocConfig()
    """Resample-on-Correct."""
    loss: LossConfig = LossConfig()
    """The policy loss."""
    optimizer: OptimizerConfig = OptimizerConfig()
    """AdamW and its schedule."""
    init: InitConfig = InitConfig()
    """Where the policy starts (stage continuation)."""

    @property
    def rollouts_per_prompt(self) -> int:
        """2G when RoC selects, G when it is off."""
        return self.group_size if self.roc.mode == "off" else 2 * self.group_size

    @model_validator(mode="after")
    def release_floor_fits(self) -> RLConfig:
        if self.roc.mode == "release" and self.group_size < 2 * self.roc.min_per_side:
            raise ValueError(
                f"group_size {self.group_size} cannot keep roc.min_per_side={self.roc.min_per_side} "
                f"rollouts of each side in roc.mode 'release'; "
                f"use group_size >= {2 * self.roc.min_per_side}"
            )
        if self.prompts_per_step % self.updates_per_step:
            raise ValueError(
                f"prompts_per_step {self.prompts_per_step} must split evenly into "
                f"updates_per_step {self.updates_per_step}"
            )
        return self


class CheckpointConfig(Section):
    every_steps: int = Field(1, ge=1)
    """Write a checkpoint after every this many steps (1 loses at most the current step)."""
    keep_last: int = Field(2, ge=1)
    """How many complete checkpoints to keep; older ones are deleted after a new one lands."""


class LoggingConfig(Section):
    rollouts_per_step: int = Field(4, ge=0)
    """Prompt groups per step whose trajectories and RoC decisions go to rollouts/step_N.jsonl."""
    tensorboard: bool = False
    """Also write TensorBoard event files (needs the tensorboard package)."""
    wandb_project: str | None = None
    """Also log to this Weights & Biases project (needs wandb and a login)."""


class RunConfig(Section):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """Run name; everything the run writes goes to ``<runs_dir>/<name>/``."""
    seed: int = 0
    """Seeds the prompt order, rollout sampling and RoC draws."""
    runs_dir: str = "runs"
    """Parent directory of run folders."""
    model: ModelConfig = ModelConfig()
    """The policy model."""
    data: DataConfig
    """Training problems."""
    rollout: RolloutConfig = RolloutConfig()
    """How rollouts are generated."""
    rl: RLConfig
    """The GRPO-RoC algorithm, batch sizes and optimizer."""
    checkpoint: CheckpointConfig = CheckpointConfig()
    """Checkpointing."""
    logging: LoggingConfig = LoggingConfig()
    """Metrics and rollout logs."""
    cluster: ClusterConfig | None = None
    """Where the learner ranks, engine members and sandbox services run (``rstar2.cluster``);
    null trains in this process, as on a laptop."""

    @property
    def run_dir(self) -> Path:
        return Path(self.runs_dir) / self.name


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
    """Read a YAML recipe, apply ``KEY=VALUE`` dotted overrides in order, validate."""
    return validate_config(read_recipe(path, overrides), source=str(path))


def read_recipe(path: str | Path, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """A YAML recipe as a raw tree with the overrides applied, not yet validated (a pipeline
    recipe pops its own section first, e.g. ``gsm8k:`` in ``recipes/gsm8k-cpu.yaml``)."""
    path = Path(path)
    try:
        tree = yaml.load(path.read_text(), Loader=RecipeLoader) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read recipe: {error}") from error
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: a recipe is a mapping of sections, got {type(tree).__name__}")
    for override in overrides:
        apply_override(tree, override)
    return tree


def validate_config(tree: dict[str, Any], source: str = "config") -> RunConfig:
    """Build a ``RunConfig`` or raise ``ConfigError`` listing every bad field."""
    return validate_tree(RunConfig, tree, source)


def validate_tree(root: type[ModelT], tree: dict[str, Any], source: str = "config") -> ModelT:
    """Build ``root`` (a recipe's top section) from ``tree`` or raise ``ConfigError`` listing
    every bad field by its dotted path."""
    try:
        return root.model_validate(tree)
    except ValidationError as error:
        lines = [describe_error(problem, root) for problem in error.errors()]
        if len(lines) == 1:
            raise ConfigError(f"{source}: {lines[0]}") from None
        raise ConfigError(f"{source}: {len(lines)} problems:\n  " + "\n  ".join(lines)) from None


def apply_override(tree: dict[str, Any], override: str) -> None:
    """Set ``a.b.c=value`` in a raw recipe tree; the value is read as YAML (``1e-6``, ``true``,
    ``[a, b]``, ``null``), and missing sections are created."""
    key, sep, text = override.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"--set {override!r}: expected KEY=VALUE with a dotted KEY")
    node = tree
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {override!r}: {'.'.join(parts[:depth + 1])} is not a section")
        node = child
    node[parts[-1]] = yaml.load(text, Loader=RecipeLoader)


def describe_error(problem: dict[str, Any], root: type[BaseModel] | None = None) -> str:
    """One pydantic error as ``dotted.path: message (got value)``; an unknown field gets a
    suggestion from the fields of ``root`` (the tree validated; default ``RunConfig``)."""
    loc = tuple(problem["loc"])
    where = ".".join(str(part) for part in loc) or "(top level)"
    kind = problem["type"]
    if kind == "extra_forbidden":
        return f"{where}: unknown field{suggestion(loc, root or RunConfig)}"
    if kind == "missing":
        return f"{where}: required field is missing"
    if kind == "literal_error":
        message = f"must be one of {', '.join(literal_options(problem['ctx']['expected']))}"
    elif kind == "value_error" and isinstance(problem["input"], dict):
        return f"{where}: {problem['ctx']['error']}"  # a section's own check; its message says it all
    elif kind == "value_error":
        message = str(problem["ctx"]["error"])  # a field's own check
    else:
        message = problem["msg"][:1].lower() + problem["msg"][1:]
    return f"{where}: {message} (got {problem['input']!r})"


def literal_options(expected: str) -> list[str]:
    """pydantic's "'a', 'b' or 'c'" as ['a', 'b', 'c']."""
    return [part.strip() for part in expected.replace(" or ", ", ").split(",")]


def suggestion(loc: Sequence[Any], root: type[BaseModel]) -> str:
    """Where a misplaced or misspelled field probably belongs, as ' (did you mean ...?)'."""
    name = str(loc[-1])
    everywhere = list(field_paths(root))
    same_name = [path for path in everywhere if path.rsplit(".", 1)[-1] == name]
    parent = ".".join(str(part) for part in loc[:-1])
    siblings = {
        path.rpartition(".")[2]: path for path in everywhere if path.rpartition(".")[0] == parent
    }
    close = difflib.get_close_matches(name, list(siblings), n=2, cutoff=0.6)
    candidates = same_name or [siblings[match] for match in close]
    return f" (did you mean {' or '.join(candidates)}?)" if candidates else ""


def field_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every dotted field path of a config tree, sections included."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        section = section_type(field.annotation)
        if section is not None:
            yield from field_paths(section, path + ".")


def section_type(annotation: Any) -> type[BaseModel] | None:
    """The section model inside ``Section`` or ``Section | None``, else None."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    for option in options:
        if isinstance(option, type) and issubclass(option, BaseModel):
            return option
    return None
