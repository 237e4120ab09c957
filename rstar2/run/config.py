"""The configuration of a training run: one tree of sections, one per component.

    config = load_config("recipes/qwen3-14b-stage1.yaml", ["rl.optimizer.lr=2e-6"])   # .recipe

``RunConfig`` holds ``rl`` (with ``roc``/``loss``/``optimizer``/``init``, ``rstar2.rl.config``),
``model``, ``checkpoint`` and ``logging`` (``rstar2.training.config``), ``data`` (the training set),
``validation`` (held-out problems the policy answers during training, ``rstar2.rl.validation``),
``rollout`` (the agent's limits and sampling, ``rstar2.agent.rollout.RolloutConfig``, handed to
the agent as it is), ``engine`` (what generates the rollouts, ``rstar2.fleet.rollout_engine``),
``sandbox`` (where tool calls run) and ``cluster`` (``rstar2.cluster.config``; null trains in
this process). Every
field carries its documentation as the docstring under it; defaults are the paper's values
(§4.3), so a recipe states what differs. Each component is handed only its own section
(``rstar2.run.settings``). Checks that span sections (a greedy training rollout, LoRA with an
engine holding its own copy) are made here, where the recipe is read.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from rstar2.agent.rollout import RolloutConfig
from rstar2.cluster.config import ClusterConfig
from rstar2.data.problems import FieldMap
from rstar2.fleet.rollout_engine import RolloutEngineConfig
from rstar2.rl.config import RLConfig
from rstar2.section import Section
from rstar2.training.config import CheckpointConfig, LoggingConfig, ModelConfig


class DataConfig(Section):
    train: str
    """The training problems (docs/data.md): a JSONL or Parquet file, a folder saved by
    Hugging Face ``datasets``, a folder of such files, or a hub data set ``org/name[@revision]``
    from the HF cache, or a data set packaged with rstar2 by name ('gsm8k_train'; ``rstar2 data
    list``). Each row needs a problem and a gold answer, under the names ``fields``
    gives them; the paper's RL data has integer answers (``rstar2 data integer-filter``)."""
    fields: FieldMap = FieldMap()
    """Which field of a row holds the problem, the answer and the id, e.g. ``{problem:
    question, answer: final_answer}``."""
    split: str | None = None
    """The split of ``train`` to read where it has several (a ``DatasetDict`` folder, a hub
    data set); null reads the only one."""
    subset: str | None = None
    """The subset (configuration) of a hub data set that has several."""
    keep_ids: str | None = None
    """Only the problems this list names are trained on: a data set such as ``rstar2 data
    difficulty-filter``'s output (read with ``fields``), or a text file of one id per line.
    Stage 3 uses it for the hard subset (problems not solved 8/8 by the stage-2 policy)."""
    max_prompt_tokens: int = Field(2048, ge=1)
    """Problems whose prompt is longer than this are skipped (release: 2048)."""
    shuffle: bool = True
    """Draw the problems in a fresh seeded order each epoch; false takes them in file order
    (a curriculum, e.g. the GSM8K recipe's easiest-first RL set)."""


class ValidationConfig(Section):
    """Held-out probes during training (``rstar2.rl.validation``); what they do and log is the
    ``RunConfig.validation`` field's description, which the configuration reference shows."""

    data: str | None = None
    """The held-out problems, in the same form as ``data.train`` (a JSONL or Parquet file, a
    data set by name, ...) and read through the same ``data.fields``; problems whose prompt
    exceeds ``data.max_prompt_tokens`` are skipped, as in training."""
    split: str | None = None
    """The split of ``data`` to read where it has several (a hub data set's 'test')."""
    every_steps: int | None = Field(None, ge=1)
    """Probe after every this many steps (and before the first, after the last); null: no
    validation, ``data`` unused. Each probe costs about one greedy evaluation of ``data``."""
    limit: int | None = Field(None, ge=1)
    """Only the first this many problems of ``data`` (after the prompt-length filter)."""

    @model_validator(mode="after")
    def has_data(self) -> ValidationConfig:
        if self.every_steps is not None and self.data is None:
            raise ValueError("every_steps needs data, the held-out problems to answer (--set "
                             "validation.data=PATH: JSONL rows of id, problem, answer, as data.train)")
        return self


class SandboxConfig(Section):
    urls: tuple[str, ...] = ()
    """Sandbox services (``rstar2 sandbox serve``) to run tool calls on; empty starts a
    private local one (on a cluster: ``cluster.sandbox`` services on every node)."""
    workers: int = Field(2, ge=1)
    """Worker processes of the private local sandbox (unused when ``urls`` is set)."""


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
    validation: ValidationConfig = ValidationConfig()
    """Held-out problems the policy answers during training, a learning curve; off unless
    ``every_steps`` is set. Each probe answers every problem of ``data`` once, greedily
    (temperature 0), with the run's agent loop, tools, ``rollout:`` limits and reward: before
    the first step of a fresh run, after every ``every_steps``-th step and after the last.
    ``val/accuracy`` (the mean reward: the share correct under the verifier), ``val/problems``,
    ``val/tool_call_rate``, ``val/tool_error_ratio``, ``val/reward_failures`` and
    ``time/validation`` go into that step's row of metrics.jsonl (a row of step 0 holds the
    first probe) and its console line (``val``). Training samples and learns exactly as without
    the probes; a resumed run does not repeat the probes it logged."""
    rollout: RolloutConfig = RolloutConfig()
    """One rollout's limits and sampling: the agent receives this section as it is."""
    engine: RolloutEngineConfig = RolloutEngineConfig()
    """What generates the rollouts: one engine, or a fleet of members."""
    sandbox: SandboxConfig = SandboxConfig()
    """Where the tool calls run."""
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

    @model_validator(mode="after")
    def trainable(self) -> RunConfig:
        """What no single section can check: the rollouts must be sampled (the loss needs
        their log-probs at a temperature) under a known tool deadline, and LoRA adapters live in the trainer's model, which
        an engine with its own copy of the weights never sees."""
        if self.rollout.temperature == 0:
            raise ValueError("rollout: temperature must be above 0 to train (got 0): a greedy "
                             "rollout has no sampling distribution to learn from")
        if self.rollout.tool_timeout_s is None:
            raise ValueError("rollout: tool_timeout_s must be set to train: the sandbox services "
                             "a run starts take it as their deadline")
        if self.model.lora is not None and self.engine.members:
            raise ValueError("engine: a fleet's members hold their own weights: engine.members "
                             "needs full fine-tuning, not LoRA (model.lora)")
        if self.model.lora is not None and self.engine.dtype is not None:
            raise ValueError("engine: engine.dtype needs full fine-tuning: LoRA adapters "
                             "(model.lora) live in the trainer's model, which the engine must "
                             "then share (leave engine.dtype null)")
        if self.rl.asynchronous.enabled and self.engine.kind == "hf" and not self.engine.members \
                and self.engine.dtype is None:
            raise ValueError("rl.asynchronous: the engine keeps sampling while the learner updates, "
                             "so it needs its own copy of the weights: set engine.dtype ('auto' "
                             "picks the faster dtype for this machine)")
        if self.rl.asynchronous.enabled and self.model.lora is not None:
            raise ValueError("rl.asynchronous needs full fine-tuning: LoRA adapters (model.lora) "
                             "live in the trainer's model, which an engine sampling beside the "
                             "update cannot share")
        return self
