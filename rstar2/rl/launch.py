"""Everything a training run needs around the trainer: the run folder, the policy, the engine,
the sandbox and the grader, built from a ``RunConfig``; closed again when the run ends.

    final_dir = train(config, resume=False)

Contract: a run folder that already holds checkpoints is only continued with ``resume``, never
silently overwritten; the resolved configuration is written to ``<run>/config.yaml``; the
engine is built by ``rstar2.engines.factory`` from ``rollout.engine`` ('hf' is colocated: it
samples from the trainer's own model, one process, CPU or one GPU, unless
``rollout.engine_dtype`` gives it its own copy); the trainer is a ``LocalLearner`` and a
``Sampler`` around the step (``build_trainer``); the sandbox is the configured services or a
private local one; at the end the trained policy is saved as a plain model directory
``<run>/final`` with its card
(``rstar2.agent.card``: the prompt and limits it was trained with). A ``cluster:`` section hands
the run to ``rstar2.cluster.launch`` (Ray, the FSDP2 learner, a fleet of actor members) after
the same run-folder checks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path

import yaml
from rich.console import Console

from rstar2.agent.card import ModelCard, new_card
from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.agent.rollout import CodeRunner
from rstar2.data import DataError
from rstar2.data.benchmarks import benchmark_path
from rstar2.data.problems import Problem, read_problems
from rstar2.engines.base import TrainableEngine
from rstar2.engines.device import module_device, resolve_device
from rstar2.engines.dtype_choice import ModelShapes, resolve_dtype
from rstar2.engines.factory import EngineSpec, open_fleet, open_trainable_engine
from rstar2.engines.loading import load_tokenizer, loadable_model_dir
from rstar2.reward import Grader
from rstar2.rl.checkpoint import latest_checkpoint
from rstar2.rl.config import RunConfig
from rstar2.rl.learner import LocalLearner
from rstar2.rl.policy import load_policy, save_policy
from rstar2.rl.sampler import Sampler
from rstar2.rl.trainer import Trainer
from rstar2.sandbox import SandboxClient, local_sandbox


class RunExists(RuntimeError):
    """The run folder holds another run's checkpoints and ``resume`` was not asked for."""


def train(config: RunConfig, resume: bool = False, console: Console | None = None) -> Path:
    """Run (or continue) the training ``config`` describes; returns the final model directory."""
    console = console or Console()
    if config.cluster is not None:
        from rstar2.cluster.plan import check_cluster_run

        check_cluster_run(config)  # before anything is written
    check_run_dir(config, resume)
    loadable_model_dir(config.model.path)  # a missing, gated or unsupported model: before anything
    config, note = resolve_auto_dtypes(config)
    if note:
        console.print(note, highlight=False)
    tokenizer = load_tokenizer(config.model.path)
    problems = training_problems(config, tokenizer)  # bad data is refused before anything is written
    config.run_dir.mkdir(parents=True, exist_ok=True)
    (config.run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    if config.cluster is not None:
        from rstar2.cluster.launch import train_on_cluster

        return train_on_cluster(config, tokenizer, problems, resume, console,
                                run_card(config, "rstar2 train"))
    model = load_policy(config.model)
    engine = rollout_engine(config, model, tokenizer)
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: asyncio.run(engine.close()))
        urls = list(config.rollout.sandbox_urls) or [
            stack.enter_context(local_sandbox(workers=config.rollout.sandbox_workers,
                                              timeout_s=config.rollout.tool_timeout_s))]
        grader = stack.enter_context(Grader())  # one grading process per core
        asyncio.run(run_trainer(config, model, tokenizer, engine, urls, grader, problems, resume, console))
    return save_policy(model, tokenizer, config.run_dir / "final", run_card(config, "rstar2 train"))


def resolve_auto_dtypes(config: RunConfig) -> tuple[RunConfig, str]:
    """``config`` with ``model.compute_dtype`` and ``rollout.engine_dtype`` 'auto' made
    concrete for this machine (``rstar2.engines.dtype_choice``), and the one line that says
    what was chosen and why ('' when nothing was 'auto'). An engine that would hold a copy of the
    weights in the policy's own dtype on its own device samples from the policy itself instead
    (``engine_dtype`` null: no second copy, no recomputed log-probs), as one does with LoRA. The run's config.yaml then
    records the choice, and a resumed run keeps it."""
    shapes = lambda: ModelShapes.of(config.model.path)  # noqa: E731 (read only if a probe needs it)
    device = resolve_device(config.model.device)
    compute = resolve_dtype(config.model.compute_dtype, "train", device, shapes)
    engine_device = resolve_device(config.rollout.engine_device or config.model.device)
    engine = resolve_dtype(config.rollout.engine_dtype or "", "decode", engine_device, shapes,
                           rows=config.rl.prompts_per_step * config.rl.rollouts_per_prompt)
    model, rollout = config.model, config.rollout
    notes = []
    if compute is not None:
        model = model.model_copy(update={"compute_dtype": compute.dtype})
        notes.append(compute.note("training compute dtype"))
    if engine is not None:
        same_copy = engine.dtype == config.model.dtype and engine_device == device and not rollout.members
        colocated = same_copy or config.model.lora is not None  # adapters: the engine shares the model
        rollout = rollout.model_copy(update={"engine_dtype": None if colocated else engine.dtype})
        notes.append(engine.note("engine dtype" + (" (samples from the policy itself)" if colocated else "")))
    return config.model_copy(update={"model": model, "rollout": rollout}), "; ".join(notes)


def run_card(config: RunConfig, trained_by: str) -> ModelCard:
    """The card of a model this run trains: its prompt and rollout limits."""
    return new_card(PromptConfig(variant=config.rollout.prompt), config.rollout.max_response_tokens,
                    config.rollout.max_turns, f"{trained_by} ({config.name})")


def rollout_engine(config: RunConfig, model, tokenizer) -> TrainableEngine:
    """The engine ``rollout.engine`` names, built by ``rstar2.engines.factory``. 'hf' samples
    from the trainer's model itself, or from its own copy of the weights in
    ``rollout.engine_dtype`` (filled by the first weight push) on ``rollout.engine_device``,
    by default the model's device. With ``rollout.members`` it is a fleet over them
    (``factory.open_fleet``), scheduled by ``rollout.scheduler``."""
    engine_dtype = config.rollout.engine_dtype
    if config.rollout.members:
        if config.model.lora is not None:
            raise ValueError("a fleet's members hold their own weights: rollout.members needs "
                             "full fine-tuning, not model.lora")
        return open_fleet(config.rollout.members, config.rollout.scheduler, model=config.model.path,
                          dtype=engine_dtype or config.model.dtype, seed=config.seed,
                          tokenizer=tokenizer)
    if engine_dtype is not None and config.model.lora is not None:
        raise ValueError("rollout.engine_dtype needs full fine-tuning: with model.lora the engine "
                         "shares the trainer's model (leave engine_dtype null)")
    device = config.rollout.engine_device if engine_dtype is not None else None
    spec = EngineSpec(kind=config.rollout.engine, model=config.model.path,
                      dtype=engine_dtype or config.model.dtype, seed=config.seed,
                      device=device or str(module_device(model)),
                      max_batch_size=config.rl.prompts_per_step * config.rl.rollouts_per_prompt)
    shared = model if config.rollout.engine == "hf" and engine_dtype is None else None
    return open_trainable_engine(spec, model=shared, tokenizer=tokenizer)


def build_trainer(config: RunConfig, model, tokenizer, engine: TrainableEngine, code_runner: CodeRunner | None,
                  grader: Grader | None, problems: Sequence[Problem], console: Console | None = None) -> Trainer:
    """A trainer whose policy lives in this process (``LocalLearner``), sampling from ``engine``."""
    learner = LocalLearner(config, model, engine, tokenizer.pad_token_id)
    sampler = Sampler(engine, tokenizer, code_runner, grader, config.rollout, config.rl.rollouts_per_prompt)
    return Trainer(config, learner, sampler, problems, console)


async def run_trainer(config, model, tokenizer, engine, urls, grader, problems, resume, console) -> None:
    async with SandboxClient(urls) as sandbox:
        trainer = build_trainer(config, model, tokenizer, engine, sandbox, grader, problems, console)
        trainer.restore(resume)
        if trainer.completed_steps:
            console.print(f"resuming {config.run_dir} after step {trainer.completed_steps}")
        await trainer.run()


def check_run_dir(config: RunConfig, resume: bool) -> None:
    if not resume and latest_checkpoint(config.run_dir / "checkpoints") is not None:
        raise RunExists(f"{config.run_dir} already holds checkpoints: pass --resume to continue "
                        "that run, or --name to start another")


def training_problems(config: RunConfig, tokenizer) -> list[Problem]:
    """The training set: ``data.train``, cut to ``data.keep_ids`` when given, without problems
    whose prompt exceeds ``data.max_prompt_tokens``."""
    problems = read_problems(benchmark_path(config.data.train))
    if config.data.keep_ids:
        if not Path(config.data.keep_ids).is_file():
            raise DataError(f"data.keep_ids: {config.data.keep_ids}: no such file")
        keep = set(Path(config.data.keep_ids).read_text().split())
        problems = [p for p in problems if p.id in keep]
    chat = ChatFormat(tokenizer, PromptConfig(variant=config.rollout.prompt))
    problems = [p for p in problems if len(chat.prompt_ids(p.problem)) <= config.data.max_prompt_tokens]
    if not problems:
        raise DataError(f"{config.data.train}: no training problem fits data.max_prompt_tokens "
                         f"({config.data.max_prompt_tokens}) and data.keep_ids")
    return problems
