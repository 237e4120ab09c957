"""``run_training(config, placement)``: the one way a training run is wired.

    final_dir = train(config, resume=False)                       # rstar2 train
    final_dir = await run_training(config, LocalPlacement(config, model=policy), grader=grader)

``rstar2 train``, ``rstar2 demo`` (and its GSM8K recipe) and a cluster run all come here; only
the placement differs (``rstar2.run.placement``). In order, before anything is written: the
placement checks the run (a cluster plan that cannot fit, a missing extra), a run folder that
holds checkpoints is continued only with ``resume`` (never silently overwritten), and the
training set is read through ``data.fields`` and filtered (``data.keep_ids``,
``data.max_prompt_tokens`` with the ``rollout.tools`` listed, whose factories are called here
for their schemas), so is the held-out set of ``validation:`` when it is on, and the reward is
imported (``rl.reward``, else the verifier). Then the resolved config goes to
``<run>/config.yaml``; the placement opens the sandboxes, the engine and the learner into one
exit stack, which this function owns and closes in reverse whatever happens; the ``Sampler``
and the ``Trainer`` (with a greedy ``Sampler`` for its ``Validator``) are wired around them
(``build_trainer``), each with its own section; and the trained policy is exported as
``<run>/final`` with its card (``rstar2.agent.card``: the prompt, tools and limits it was
trained with). A run that stopped because it learned nothing is exported too, and then fails
with ``NothingLearned`` (``rstar2.rl.silence``), which names where that model is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import yaml
from rich.console import Console

from rstar2.agent.card import ModelCard, new_card
from rstar2.agent.prompt import ChatFormat
from rstar2.agent.tools import CodeRunner, ToolConfigError, ToolContext, describe_tools
from rstar2.data import DataError
from rstar2.data.benchmarks import load_benchmark
from rstar2.data.problems import Problem, read_ids
from rstar2.engines.base import TrainableEngine
from rstar2.models.device import resolve_device
from rstar2.models.dtype_choice import ModelShapes, resolve_dtype
from rstar2.models.loading import load_tokenizer, loadable_model_dir
from rstar2.reward import CustomReward, Grader, Reward, RewardError
from rstar2.rl.learner import Learner
from rstar2.rl.sampler import Sampler
from rstar2.rl.silence import NothingLearned
from rstar2.rl.trainer import Trainer
from rstar2.rl.validation import Validator
from rstar2.run.config import RunConfig
from rstar2.run.placement import LocalPlacement, Placement
from rstar2.run.settings import cluster_job, learner_settings, trainer_settings
from rstar2.sandbox import SandboxClient, SandboxUnavailable
from rstar2.training.checkpoint import check_run_dir


def train(config: RunConfig, resume: bool = False, console: Console | None = None) -> Path:
    """Run (or continue) the training ``config`` describes, placed where its ``cluster:``
    section says (this process without one); returns the final model directory."""
    console = console or Console()
    config, note = resolve_auto_dtypes(config)
    if note:
        console.print(note, highlight=False)
    return asyncio.run(run_training(config, placement_for(config, console), resume=resume,
                                    console=console))


def resolve_auto_dtypes(config: RunConfig) -> tuple[RunConfig, str]:
    """``config`` with ``model.compute_dtype`` and ``engine.dtype`` 'auto' made concrete for
    this machine (``rstar2.models.dtype_choice``), and the one line that says what was chosen
    and why ('' when nothing was 'auto'). An engine that would hold a copy of the weights in
    the policy's own dtype on its own device samples from the policy itself instead (no second
    copy, no recomputed log-probs), as one does with LoRA. The run's config.yaml then records
    the choice, and a resumed run keeps it."""
    shapes = lambda: ModelShapes.of(config.model.path)  # noqa: E731 (read only if a probe needs it)
    device = resolve_device(config.model.device)
    compute = resolve_dtype(config.model.compute_dtype, "train", device, shapes)
    engine_device = resolve_device(config.engine.device or config.model.device)
    chosen = resolve_dtype(config.engine.dtype or "", "decode", engine_device, shapes,
                           rows=config.rl.prompts_per_step * config.rl.rollouts_per_prompt)
    model, engine = config.model, config.engine
    notes = []
    if compute is not None:
        model = model.model_copy(update={"compute_dtype": compute.dtype})
        notes.append(compute.note("training compute dtype"))
    if chosen is not None:
        same_copy = chosen.dtype == config.model.dtype and engine_device == device and not engine.members
        # adapters: the engine shares the model; asynchronous: the engine samples beside the
        # update, so it keeps a copy of its own
        colocated = (same_copy or config.model.lora is not None) and not config.rl.asynchronous.enabled
        engine = engine.model_copy(update={"dtype": None if colocated else chosen.dtype})
        notes.append(chosen.note("engine dtype" + (" (samples from the policy itself)" if colocated else "")))
    return config.model_copy(update={"model": model, "engine": engine}), "; ".join(notes)


def placement_for(config: RunConfig, console: Console) -> Placement:
    """``RayPlacement`` for a run with a ``cluster:`` section (Ray is imported only then),
    else ``LocalPlacement``."""
    if config.cluster is None:
        return LocalPlacement(config)
    from rstar2.cluster.placement import RayPlacement

    return RayPlacement(cluster_job(config), console)


async def run_training(config: RunConfig, placement: Placement, *, resume: bool = False,
                       console: Console | None = None, grader: Grader | None = None,
                       trained_by: str = "rstar2 train") -> Path:
    """The run ``config`` describes, its parts placed by ``placement``; returns the exported
    model directory. ``grader``: one the caller owns and keeps (the demo's, shared with its
    evaluations); None opens one for the run. A recipe's own reward (``rl.reward``) is used
    instead of either. ``trained_by`` goes on the model's card."""
    console = console or Console()
    placement.check()
    check_run_dir(config.run_dir, resume)
    loadable_model_dir(config.model.path)  # a missing, gated or unsupported model: before anything
    tokenizer = load_tokenizer(config.model.path)
    problems = training_problems(config, tokenizer)  # bad data is refused before anything is written
    heldout = validation_problems(config, tokenizer)
    reward = open_reward(config, grader)  # so is a reward function that cannot be imported
    config.run_dir.mkdir(parents=True, exist_ok=True)
    (config.run_dir / "config.yaml").write_text(
        yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    async with AsyncExitStack() as stack:
        urls = placement.open_sandboxes(stack)
        engine = placement.open_engine(tokenizer, stack)
        learner = placement.open_learner(engine, learner_settings(config), stack)
        if reward is not grader:
            stack.callback(reward.close)  # the run's own: closed with it
        sandbox = await stack.enter_async_context(SandboxClient(urls))
        trainer = build_trainer(config, learner, engine, tokenizer, sandbox, reward, problems, console, heldout)
        trainer.restore(resume)
        if trainer.completed_steps:
            console.print(f"resuming {config.run_dir} after step {trainer.completed_steps}")
        export = lambda: placement.export(learner, tokenizer, config.run_dir / "final",  # noqa: E731
                                          run_card(config, trained_by))
        try:
            await trainer.run()
        except SandboxUnavailable:
            placement.check_sandboxes()  # names the node whose services are gone, if that is why
            raise
        except NothingLearned as stopped:
            stopped.exported = export()  # the model it stopped with, for a look at what it does
            raise
        return export()


def build_trainer(config: RunConfig, learner: Learner, engine: TrainableEngine, tokenizer,
                  code_runner: CodeRunner | None, reward: Reward, problems: Sequence[Problem],
                  console: Console | None = None, heldout: Sequence[Problem] = ()) -> Trainer:
    """The step loop around ``learner`` and a ``Sampler`` over ``engine``: the agent gets the
    ``rollout:`` section as it is, the trainer its own settings. With ``validation.every_steps``
    the trainer also gets a ``Validator`` of the ``heldout`` problems, whose sampler shares
    everything with training's but the temperature (0) and the rollouts per problem (1)."""
    sampler = Sampler(engine, tokenizer, code_runner, reward, config.rollout, config.rl.rollouts_per_prompt)
    validator = None
    if config.validation.every_steps is not None:
        greedy = Sampler(engine, tokenizer, code_runner, reward,
                         config.rollout.model_copy(update={"temperature": 0.0}), rollouts_per_prompt=1)
        validator = Validator(greedy, heldout, config.validation.every_steps, config.seed)
    return Trainer(trainer_settings(config), learner, sampler, problems, console, validator)


def open_reward(config: RunConfig, grader: Grader | None = None) -> Reward:
    """The run's ``Reward``: ``rl.reward``'s function (checked to import here, before the run
    writes anything) in deadline-bounded workers, else the built-in verifier (``grader``, the
    caller's, or a new one); both start their workers on first use. A new one is the caller's
    to close. The only place that knows the kinds of reward: everything after calls the
    protocol."""
    if config.rl.reward is None:
        return grader or Grader()  # one grading process per core
    try:
        return CustomReward(config.rl.reward, deadline_s=config.rl.reward_deadline_s,
                            binary=config.rl.roc.mode != "off")
    except RewardError as error:
        raise RewardError(f"rl.{error}") from None


def tool_schemas(config: RunConfig) -> list[dict]:
    """The schemas of ``rollout.tools``, as the prompt lists them; a list that cannot be built
    is refused here, before the run writes anything."""
    rollout = config.rollout
    context = ToolContext(timeout_s=rollout.tool_timeout_s, python_name=rollout.prompt.tool_name)
    try:
        return describe_tools(rollout.tools, context)
    except ToolConfigError as error:
        raise ToolConfigError(f"rollout.tools: {error}") from None


def run_card(config: RunConfig, trained_by: str) -> ModelCard:
    """The card of a model this run trains: its prompt, tools and rollout limits."""
    return new_card(config.rollout.prompt, config.rollout.max_response_tokens,
                    config.rollout.max_turns, f"{trained_by} ({config.name})", tools=config.rollout.tools)


def training_problems(config: RunConfig, tokenizer) -> list[Problem]:
    """The training set: ``data.train`` (a packaged data set by name, or a source read through
    ``data.fields``), cut to ``data.keep_ids`` when given, without problems whose prompt (with
    ``rollout.tools`` listed) exceeds ``data.max_prompt_tokens``."""
    data = config.data
    problems = load_benchmark(data.train, fields=data.fields, split=data.split, subset=data.subset).problems
    if data.keep_ids:
        try:
            keep = read_ids(data.keep_ids, data.fields)
        except DataError as error:
            raise DataError(f"data.keep_ids: {error}") from None
        problems = [p for p in problems if p.id in keep]
    problems = prompts_that_fit(config, tokenizer, problems)
    if not problems:
        raise DataError(f"{data.train}: no training problem fits data.max_prompt_tokens "
                        f"({data.max_prompt_tokens}) and data.keep_ids")
    return problems


def validation_problems(config: RunConfig, tokenizer) -> list[Problem]:
    """The held-out set of ``validation:`` (none while it is off): ``validation.data`` read
    through ``data.fields``, without problems whose prompt exceeds ``data.max_prompt_tokens``,
    cut to the first ``validation.limit``."""
    validation = config.validation
    if validation.every_steps is None:
        return []
    try:
        problems = load_benchmark(validation.data, fields=config.data.fields, split=validation.split).problems
    except DataError as error:
        raise DataError(f"validation.data: {error}") from None
    problems = prompts_that_fit(config, tokenizer, problems)[:validation.limit]
    if not problems:
        raise DataError(f"validation.data: {validation.data}: no problem fits data.max_prompt_tokens "
                        f"({config.data.max_prompt_tokens})")
    return problems


def prompts_that_fit(config: RunConfig, tokenizer, problems: Sequence[Problem]) -> list[Problem]:
    """The ``problems`` whose prompt, with ``rollout.tools`` listed, fits ``data.max_prompt_tokens``."""
    chat = ChatFormat(tokenizer, config.rollout.prompt, tool_schemas(config))
    return [p for p in problems if len(chat.prompt_ids(p.problem)) <= config.data.max_prompt_tokens]
