"""``rstar2 demo``: the paper's recipe in miniature on the embedded SmolLM2-135M-Instruct, on CPU.

    report = run_demo()  # or run_demo(overrides=["demo.heldout_problems=300", "rl.steps=20"])

1. **Data.** Seeded templates (``rstar2.sft``) make three disjoint problem sets: SFT (basic),
   RL (hard: larger numbers, two-step variants; a fifth basic, so RL keeps the basic forms) and
   held-out (half of each level).
2. **Cold-start SFT.** Scripted tool-use traces played through the real agent loop and sandbox
   (a share of them fix a failing first program), mostly basic problems and a few hard ones,
   written as chat-format conversations and trained on by ``rstar2 sft``'s ``run_sft``
   (cross-entropy on the assistant's tokens).
3. **GRPO-RoC** with the recipe (``recipes/cpu-demo.yaml``) on the RL set, through the same
   wiring as ``rstar2 train`` (``rstar2.run.training.run_training``: the same training-set
   filters, the same ``config.yaml``), with the SFT'd policy, the demo's engine and sandbox
   handed to its ``LocalPlacement``; a few held-out probes during it, a learning curve (the
   ``validation:`` section on a fixed subset of the held-out set, ``PROBE_PROBLEMS``).
4. **Evaluation** of the base, the SFT-only and the final model on the held-out set, greedy, with
   the eval harness (``rstar2.eval.runner``); curves of the RL phase as ``curves.png``.

Everything lands in ``runs/<name>/``: ``data/``, the SFT run ``sft/`` (its model in
``sft/final/``), the final model ``final/``, the RL run's ``config.yaml``, ``metrics.jsonl``,
``rollouts/`` and ``checkpoints/``, ``eval/{base,sft,final}/``, ``curves.png`` and
``summary.json``. One fp32 policy is trained throughout; the dtypes its matmuls and the engine
compute in are the recipe's, 'auto' (``rstar2.models.dtype_choice``): bfloat16 autocast and a
bfloat16 engine copy that samples rollouts and answers the evaluations (weights pushed before
each) on CPUs with bfloat16 instructions, float32 and an engine that samples from the policy
itself where bfloat16 would be emulated.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from itertools import zip_longest
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console

from rstar2 import RECIPES
from rstar2.agent.prompt import ChatFormat
from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.data.benchmarks import load_benchmark
from rstar2.data.problems import Problem
from rstar2.demo.plot import plot_curves
from rstar2.eval.launch import agent_solver
from rstar2.eval.metrics import paired_difference
from rstar2.eval.runner import SAMPLES_JSONL, EvalSettings, run_eval
from rstar2.eval.samples import SampleOutcome, read_outcomes
from rstar2.models.loading import load_tokenizer, loadable_model_dir
from rstar2.models.memory import return_freed_memory
from rstar2.recipe import ConfigError, describe_error, read_recipe
from rstar2.reward import Grader
from rstar2.run.config import RunConfig
from rstar2.run.placement import LocalPlacement, rollout_batch_size, rollout_engine
from rstar2.run.recipe import validate_config
from rstar2.run.training import resolve_auto_dtypes, run_training
from rstar2.sandbox import SandboxClient, local_sandbox
from rstar2.sft.config import AgentFormat, SFTConfig, SFTDataConfig, SFTModelConfig, SFTSettings, SFTTraining
from rstar2.sft.dataset import sft_traces, split_tasks, write_problems, write_traces
from rstar2.sft.run import run_sft
from rstar2.tasks.templates import Task
from rstar2.training.config import CheckpointConfig
from rstar2.training.policy import load_policy
from rstar2.training.runlog import read_metrics

DEFAULT_RECIPE = RECIPES / "cpu-demo.yaml"


SettingsT = TypeVar("SettingsT", bound=BaseModel)
"""A pipeline's section (``DemoSettings``, the GSM8K recipe's): a model with ``sft_model``."""


SECTION = "demo"

PROBES_FILE = "heldout_probes.jsonl"
PROBE_PROBLEMS = 12
PROBE_EVERY_STEPS = 4
"""The RL phase's held-out probes where the recipe's ``validation:`` section does not say
otherwise: ``PROBE_PROBLEMS`` held-out problems spread over its levels and families,
answered greedily before the first step, every ``PROBE_EVERY_STEPS`` steps and after the last:
few and small, because each probe is a greedy evaluation the RL phase waits for
(docs/demo.md has what they cost)."""


class DemoSettings(BaseModel):
    """The recipe's optional ``demo:`` section (``--set demo.heldout_problems=300``): the data
    and the phases around the RL run; the defaults are the demo's measured sizes."""

    model_config = ConfigDict(extra="forbid")

    sft_problems: int = Field(112, ge=1, description="SFT traces of basic problems.")
    sft_hard_problems: int = Field(24, ge=0, description="SFT traces of hard problems (RL's kind), "
                                   "so that RL starts with some success on them.")
    sft_broken_share: float = Field(0.2, ge=0, le=1, description="Share of SFT traces whose first "
                                    "call fails and is fixed.")
    rl_problems: int = Field(400, ge=1, description="RL training problems (hard).")
    rl_basic_problems: int = Field(250, ge=0, description="Basic problems mixed into the RL set, so that "
                                   "RL on the hard variants does not unlearn the basic forms.")
    heldout_problems: int = Field(300, ge=2, description="Held-out problems, half basic, half hard: "
                                  "enough for the paired difference of two models to show a gain.")
    sft: SFTSettings = Field(default_factory=lambda: SFTSettings(epochs=1, batch_size=8, lr=1e-4, warmup_steps=3),
                             description="The cold-start SFT.")
    sft_model: str | None = Field(None, description="Skip the SFT: start RL from this model directory "
                                  "(an earlier demo's sft/final), e.g. to compare RL settings from one start.")
    eval_max_tokens: int = Field(320, ge=16, description="Token budget of a held-out answer.")
    eval_max_turns: int = Field(3, ge=1, description="Assistant turns of a held-out answer.")


class Phase(BaseModel):
    """What one evaluated model achieved on the held-out set."""

    accuracy: float
    accuracy_ci: list[float]
    """95% bootstrap interval of the accuracy over problems (the eval harness's)."""
    tool_call_rate: float
    tool_error_ratio: float
    tool_error_ratio_in_correct: float
    """Failed calls over calls inside correct answers: what RoC aims to lower (report Fig. 4)."""
    results: str


def run_demo(recipe: str | Path = DEFAULT_RECIPE, overrides: Sequence[str] = (), name: str | None = None,
             console: Console | None = None) -> dict:
    """Run the whole demo (module docstring); returns the summary also written to summary.json."""
    console = console or Console()
    settings, config = load_pipeline_recipe(recipe, overrides, name, SECTION, DemoSettings, probes=PROBES_FILE)
    config = machine_dtypes(config, console)
    return run_pipeline(config, lambda url, grader, out: phases(settings, config, url, grader, out), console)


def load_pipeline_recipe(path: str | Path, overrides: Sequence[str], name: str | None, section: str,
                         settings_type: type[SettingsT], probes: str | None = None) -> tuple[SettingsT, RunConfig]:
    """A pipeline recipe's two parts: its own ``section`` (``demo:``, ``gsm8k:``; absent means
    the defaults) and the RL run, which trains on the run's own ``data/rl_train.jsonl`` and
    starts from the section's ``sft_model`` when one is given; with ``probes`` (a file the
    pipeline writes in ``data/``) the RL run validates on it every ``PROBE_EVERY_STEPS`` steps,
    in each field of ``validation:`` the recipe and its overrides leave unset
    (``--set validation.every_steps=null`` turns the probes off). Every bad field of either is
    refused here, before anything is written."""
    tree = read_recipe(path, overrides)
    try:
        settings = settings_type.model_validate(tree.pop(section, None) or {})
    except ValidationError as error:
        lines = [f"{section}.{describe_error(problem, settings_type)}" for problem in error.errors()]
        raise ConfigError(f"{path}: " + "; ".join(lines)) from None
    name = tree["name"] = str(name or tree.get("name"))
    tree.setdefault("data", {})["train"] = str(Path(tree.get("runs_dir", "runs")) / name / "data" / "rl_train.jsonl")
    if probes:  # beside the training problems
        tree["validation"] = {"data": str(Path(tree["data"]["train"]).with_name(probes)),
                              "every_steps": PROBE_EVERY_STEPS, **(tree.get("validation") or {})}
    if settings.sft_model:
        tree.setdefault("model", {})["path"] = settings.sft_model
    return settings, validate_config(tree, source=str(path))


def probe_subset(heldout: Sequence[Task]) -> list[Task]:
    """``PROBE_PROBLEMS`` of the ``heldout`` tasks taken in rounds, each round one task of every
    family at each level, so the probes cover what the held-out set measures (an even stride
    over a set whose families cycle would pick one family only); the whole set when it is that
    small."""
    kinds: dict[tuple[str, str], list[Task]] = {}
    for task in heldout:
        kinds.setdefault((task.family, task.level), []).append(task)
    families = list(dict.fromkeys(task.family for task in heldout))
    order = sorted(kinds, key=lambda kind: (families.index(kind[0]), kind[1]))
    rounds = zip_longest(*(kinds[kind] for kind in order))
    return [task for batch in rounds for task in batch if task is not None][:PROBE_PROBLEMS]


def machine_dtypes(config: RunConfig, console: Console) -> RunConfig:
    """``config`` with its 'auto' dtypes made concrete for this machine, the choice printed in
    one line (the RL run's config then records it)."""
    config, note = resolve_auto_dtypes(config)
    if note:
        console.print(note, highlight=False)
    return config


def run_pipeline(config: RunConfig, run_phases: Callable[[str, Grader, Console], Awaitable[dict]],
                 console: Console | None = None) -> dict:
    """Around ``run_phases(sandbox_url, grader, console)``: a fresh run folder holding the RL
    run's config.yaml, a private sandbox and a grader; the summary it returns, with the wall
    time and the dtypes, goes to summary.json and the closing note (shared by ``rstar2 demo``
    and its GSM8K recipe, ``rstar2.demo.gsm8k``)."""
    console = console or Console()
    started = time.perf_counter()
    run_dir = config.run_dir
    if (run_dir / "summary.json").exists() or (run_dir / "checkpoints").exists():
        raise FileExistsError(f"{run_dir} holds an earlier demo; pass --name to start another")
    loadable_model_dir(config.model.path)  # a missing or unsupported model: before the sandbox starts
    run_dir.mkdir(parents=True, exist_ok=True)  # the RL run's resolved config, dtypes included
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(local_sandbox(workers=config.sandbox.workers,
                                                timeout_s=config.rollout.tool_timeout_s))
        grader = stack.enter_context(Grader())  # one grading process per core
        summary = asyncio.run(run_phases(url, grader, console))
    summary["wall_time_s"] = time.perf_counter() - started
    summary["dtypes"] = {"training": config.model.compute_dtype,
                         "engine": config.engine.dtype or f"{config.model.dtype} (the policy itself)"}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    console.print(closing_note(summary, run_dir))
    return summary


async def phases(settings: DemoSettings, config: RunConfig, url: str, grader: Grader, console: Console) -> dict:
    run_dir = config.run_dir
    prompt = config.rollout.prompt
    tokenizer = load_tokenizer(config.model.path)
    timings: dict[str, float] = {}
    async with SandboxClient([url]) as sandbox:
        clock = time.perf_counter()
        splits = split_tasks(config.seed, settings.sft_problems, settings.rl_problems, settings.heldout_problems,
                             sft_hard=settings.sft_hard_problems, rl_basic=settings.rl_basic_problems)
        traces = await sft_traces(splits.sft, tokenizer, sandbox, prompt, settings.sft_broken_share, config.seed)
        trace_file = write_traces(run_dir / "data" / "sft_traces.jsonl", [t.key for t in splits.sft],
                                  [t.question for t in splits.sft], traces,
                                  ChatFormat(tokenizer, prompt).end_of_turn)
        write_problems(run_dir / "data" / "sft_problems.jsonl", splits.sft)
        write_problems(Path(config.data.train), splits.rl)
        heldout = write_problems(run_dir / "data" / "heldout.jsonl", splits.heldout)
        write_problems(run_dir / "data" / PROBES_FILE, probe_subset(splits.heldout))
        timings["data"] = time.perf_counter() - clock
        console.print(f"[bold]data[/]: {len(traces)} SFT traces, {len(splits.rl)} RL problems, "
                      f"{len(splits.heldout)} held-out problems in {run_dir / 'data'}")
        return await train_and_evaluate(settings, config, tokenizer, sandbox, url, grader, trace_file,
                                        heldout, timings, console)


async def train_and_evaluate(settings, config: RunConfig, tokenizer, sandbox, url: str, grader: Grader,
                             traces: Path, heldout: Path, timings: dict[str, float], console: Console,
                             before_rl: Callable[[Evaluator], Awaitable[None]] | None = None) -> dict:
    """Evaluate the base model, SFT on the conversations in ``traces`` (``run_sft``), evaluate,
    GRPO-RoC on ``config.data.train`` (``run_training``, on the sandbox at ``url``), evaluate
    (the base and the SFT are skipped with ``settings.sft_model``); ``settings`` has ``sft``,
    ``sft_model``, ``eval_max_tokens`` and ``eval_max_turns`` (``DemoSettings`` or the GSM8K
    recipe's). ``before_rl(evaluator)`` runs after the SFT's evaluation, with the engine holding
    the SFT model's weights (the GSM8K recipe picks its RL problems there)."""
    run_dir = config.run_dir
    model = load_policy(config.model)
    engine = rollout_engine(config, model, tokenizer)
    try:
        evaluate = Evaluator(settings, engine, tokenizer, sandbox, grader, config.rollout.prompt, heldout,
                             run_dir, console, concurrency=rollout_batch_size(config))
        base, losses = None, []
        if settings.sft_model is None:
            base = await evaluate("base", model)
            clock = time.perf_counter()
            cold_start = sft_config(config, settings.sft, traces)
            run_sft(cold_start, console=console, model=model, trained_by=f"rstar2 demo, SFT ({config.name})")
            return_freed_memory()  # the SFT's optimizer and activations: RL builds its own
            losses = [row["sft/loss"] for row in read_metrics(cold_start.run_dir)]
            timings["sft"] = time.perf_counter() - clock
        sft = await evaluate("sft", model)
        if before_rl is not None:
            await before_rl(evaluate)
        clock = time.perf_counter()
        placement = LocalPlacement(config, model=model, engine=engine, sandbox_urls=[url])
        await run_training(config, placement, console=console, grader=grader,
                           trained_by="rstar2 demo, SFT + RL")
        gc.collect()  # the learner (AdamW's moments) is garbage now, some of it in reference cycles
        return_freed_memory()  # ... and its heap pages go back before the final evaluation
        timings["rl"] = time.perf_counter() - clock
        final = await evaluate("final", model)
    finally:
        await engine.close()
    rows = read_metrics(run_dir, before_training=True)
    plot_curves(rows, run_dir / "curves.png", f"GRPO-RoC on SmolLM2-135M ({config.name})")
    return summary_of(base, sft, final, rows, losses, timings | evaluate.seconds,
                      problem_kinds(evaluate.benchmark.problems))


def sft_config(config: RunConfig, settings: SFTSettings, traces: Path) -> SFTConfig:
    """The cold start as an ``rstar2 sft`` run in ``<run>/sft``: the RL recipe's model and prompt,
    the pipeline's SFT settings, every trace kept (the pipeline sized them), checkpoints by time
    only."""
    model = config.model
    return SFTConfig(
        name="sft", runs_dir=str(config.run_dir),
        model=SFTModelConfig(path=model.path, device=model.device, dtype=model.dtype, lora=model.lora,
                             gradient_checkpointing=model.gradient_checkpointing),
        data=SFTDataConfig(train=str(traces), max_tokens=1 << 30),
        agent=AgentFormat(prompt=config.rollout.prompt.variant, tool_name=config.rollout.prompt.tool_name,
                          max_response_tokens=config.rollout.max_response_tokens,
                          max_turns=config.rollout.max_turns),
        train=SFTTraining(**settings.model_dump()),
        # no checkpoint of the finished SFT (weights and AdamW moments: three times its model):
        # the policy goes on to RL in this process, and sft/final holds the model
        checkpoint=CheckpointConfig(every_steps=None, every_minutes=10, last=False))


class Evaluator:
    """Greedy answers of the current weights to the held-out set, through the eval harness, with
    at most ``concurrency`` answers in flight: the rows the engine decodes at once
    (``rollout_batch_size``). More would queue each answer's next turn behind new prompts, by
    which time the engine has evicted its parked keys and prefills the whole conversation
    again."""

    def __init__(self, settings, engine, tokenizer, sandbox, grader, prompt, heldout, run_dir, console,
                 concurrency: int):
        self.engine, self.grader, self.run_dir, self.console = engine, grader, run_dir, console
        self.benchmark = load_benchmark(str(heldout))
        rollout = RolloutConfig(max_turns=settings.eval_max_turns, max_response_tokens=settings.eval_max_tokens,
                                temperature=0.0, prompt=prompt)
        self.solve = agent_solver(Agent(engine, tokenizer, sandbox, rollout))
        self.settings = EvalSettings(benchmarks=[str(heldout)], n=1, temperature=0.0,
                                     max_tokens=settings.eval_max_tokens, max_turns=settings.eval_max_turns,
                                     prompt=prompt.variant, tool_name=prompt.tool_name,
                                     concurrency=concurrency)
        self.seconds: dict[str, float] = {}

    async def __call__(self, label: str, model) -> Phase:
        started = time.perf_counter()
        await self.engine.update_weights(model.state_dict())
        out = self.run_dir / "eval" / label
        # run_eval's progress bar: a held-out evaluation is long work on a CPU
        document = await run_eval(self.settings, [self.benchmark], self.solve, out, reward=self.grader)
        await self.engine.release_cache()  # training comes next, and new weights after it
        outcomes = list(read_outcomes(out / SAMPLES_JSONL).values())
        entry = document["benchmarks"][self.benchmark.name]
        phase = Phase(accuracy=entry["avg"], accuracy_ci=entry["avg_ci"],
                      tool_call_rate=sum(o.tool_calls > 0 for o in outcomes) / len(outcomes),
                      tool_error_ratio=entry["tool_error_ratio"],
                      tool_error_ratio_in_correct=error_ratio([o for o in outcomes if o.correct]),
                      results=str(out / "results.md"))
        self.seconds[f"eval_{label}"] = time.perf_counter() - started
        self.console.print(f"[bold]eval {label}[/]: held-out accuracy {100 * phase.accuracy:.1f}%, "
                           f"tool-call rate {100 * phase.tool_call_rate:.0f}%, "
                           f"({self.seconds[f'eval_{label}']:.0f} s)")
        return phase


def error_ratio(outcomes: list[SampleOutcome]) -> float:
    calls = sum(o.tool_calls for o in outcomes)
    return sum(o.tool_errors for o in outcomes) / calls if calls else 0.0


def summary_of(base: Phase | None, sft: Phase, final: Phase, rows: list[dict], sft_losses: list[float],
               timings: dict[str, float], kinds: dict[str, str]) -> dict:
    """The demo's figures: held-out results per phase, the final model's paired gain over the
    SFT model (per kind of problem too, where ``kinds`` names them), what each RL step learned
    from, and the RL curves' start and end."""
    before, after = (outcomes_of(Path(phase.results).parent) for phase in (sft, final))
    probes = {row["step"]: row["val/accuracy"] for row in rows if "val/accuracy" in row}
    rows = [row for row in rows if row["step"] > 0]  # step 0 holds only the first probe

    def first_last(key: str) -> list[float]:
        values = [row[key] for row in rows if key in row]
        return [values[0], values[-1]] if values else []

    return {
        "heldout": {**({"base": base.model_dump()} if base else {}), "sft": sft.model_dump(),
                    "final": final.model_dump()},
        "rl_vs_sft": paired_gain(before, after),
        **({"rl_vs_sft_by_kind": accuracy_by_kind(kinds, before, after)} if kinds else {}),
        "sft_loss_first_last": [sft_losses[0], sft_losses[-1]] if sft_losses else [],
        "rl_steps": len(rows),
        "rl_probe_accuracy_by_step": probes,
        "rl_groups_with_signal_per_step": [row["reward/groups_with_signal"] for row in rows],
        "rl_groups_used_per_step": [row["roc/groups_used"] / row["roc/groups"] for row in rows],
        "rl_accuracy_first_last": first_last("reward/accuracy"),
        "rl_tool_error_in_positives_first_last": first_last("tools/error_ratio_in_positives"),
        "rl_seconds_per_step": sum(row["time/step"] for row in rows) / max(len(rows), 1),
        "phase_seconds": timings,
    }


def paired_gain(before: dict[str, float], after: dict[str, float]) -> dict:
    """``after``'s accuracy minus ``before``'s (each problem's correctness, ``outcomes_of``) over
    the problems both evaluated, with the 95% bootstrap interval of that difference resampled by
    problem (paired): the two models answered the same problems, so their difference is far
    better measured than either accuracy."""
    paired = paired_difference(before, after)
    return {} if paired is None else asdict(paired)


def outcomes_of(run: Path) -> dict[str, float]:
    """Each problem's correctness (1 or 0) in the evaluation written to ``run``."""
    return {o.problem_id: float(o.correct) for o in read_outcomes(run / SAMPLES_JSONL).values()}


def problem_kinds(problems: Sequence[Problem]) -> dict[str, str]:
    """Each problem's kind, "family (level)", from the rows' ``family`` and ``level`` fields
    (the demo's generated problems have them); empty when any row lacks them."""
    if not all("family" in p.row and "level" in p.row for p in problems):
        return {}
    return {p.id: f"{p.row['family']} ({p.row['level']})" for p in problems}


def accuracy_by_kind(kinds: dict[str, str], before: dict[str, float], after: dict[str, float]) -> dict:
    """Per kind of problem, the accuracies ``before`` and ``after`` over its problems that both
    evaluated, and their count: where RL gained, and where it unlearned what the SFT model could
    do (a pooled gain can hide a kind that fell)."""
    groups: dict[str, list[str]] = {}
    for problem, kind in kinds.items():
        if problem in before and problem in after:
            groups.setdefault(kind, []).append(problem)
    return {kind: {"problems": len(ids), "sft": sum(before[i] for i in ids) / len(ids),
                   "final": sum(after[i] for i in ids) / len(ids)} for kind, ids in sorted(groups.items())}


def closing_note(summary: dict, run_dir: Path) -> str:
    held = summary["heldout"]
    labels = {"base": "base", "sft": "SFT", "final": "SFT+RL"}
    accuracy = " -> ".join(f"{labels[k]} {100 * v['accuracy']:.1f}% "
                           f"[{100 * v['accuracy_ci'][0]:.1f}, {100 * v['accuracy_ci'][1]:.1f}]"
                           for k, v in held.items())
    calls = ", ".join(f"{labels[k]} {v['tool_call_rate']:.0%}" for k, v in held.items())
    errors = ", ".join(f"{labels[k]} {v['tool_error_ratio']:.0%} / {v['tool_error_ratio_in_correct']:.0%}"
                       for k, v in held.items())
    err = summary["rl_tool_error_in_positives_first_last"]
    err_text = f"{err[0]:.3f} -> {err[1]:.3f}" if err else "n/a"
    lines = [f"\n[bold]{summary.get('evaluated_on', 'held-out')} accuracy[/] (95% CI): {accuracy}",
             f"tool-call rate: {calls}", f"tool-error ratio (all calls / in correct answers): {errors}"]
    gain, signal = summary.get("rl_vs_sft"), summary.get("rl_groups_with_signal_per_step")
    if gain:
        lines.append(f"SFT+RL - SFT: {100 * gain['difference']:+.1f} points [{100 * gain['ci'][0]:+.1f}, "
                     f"{100 * gain['ci'][1]:+.1f}] (paired bootstrap over {gain['problems']} problems)")
    kinds = summary.get("rl_vs_sft_by_kind")
    if kinds:
        lines.append("SFT -> SFT+RL by kind: " + ", ".join(
            f"{kind} {100 * v['sft']:.0f}% -> {100 * v['final']:.0f}%" for kind, v in kinds.items()))
    lines.append(f"RL: {summary['rl_steps']} steps, {summary['rl_seconds_per_step']:.1f} s/step, "
                 f"tool-error ratio in correct rollouts {err_text}")
    if signal:
        lines.append(f"RL groups with signal per step: {', '.join(f'{share:.0%}' for share in signal)}")
    probes = summary.get("rl_probe_accuracy_by_step")
    if probes:
        lines.append("held-out probes during RL: " + ", ".join(f"step {step} {accuracy:.0%}"
                                                               for step, accuracy in probes.items()))
    used = summary.get("rl_groups_used_per_step")
    if used:
        lines.append(f"RL groups reaching the update per step: {', '.join(f'{share:.0%}' for share in used)} "
                     f"(mean {sum(used) / len(used):.0%}; the others had one outcome only, before or after RoC)")
    seconds = ", ".join(f"{phase} {value:.0f}" for phase, value in summary["phase_seconds"].items())
    lines += [f"wall time {summary['wall_time_s'] / 60:.1f} min (seconds: {seconds})",
              f"run folder {run_dir}: curves.png, summary.json, metrics.jsonl, rollouts/, eval/*/results.md, "
              f"models sft/ and final/ (rstar2 chat --model {run_dir / 'final'})"]
    return "\n".join(lines)
