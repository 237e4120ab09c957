"""``rstar2 demo --recipe gsm8k``: the demo's pipeline on real problems nobody here wrote.

    summary = run_gsm8k("recipes/gsm8k-cpu.yaml", overrides=["rl.steps=20"])

1. **Data.** GSM8K train (packaged with rstar2) is decontaminated against the test set (8-gram
   overlap, the paper's rule, ``rstar2.data.find_overlaps`` as ``rstar2 data decontaminate``);
   a seeded shuffle of what is left gives the SFT problems (all of them by default). Each gets
   ``sft_variants`` number-substitution variants (``rstar2.tasks.gsm8k_variants``: new numbers,
   the same program, the gold the sandbox computes) and one more for the RL pool; test
   problems never get any. The SFT problems and their variants become short traces through the
   real agent loop and sandbox (``rstar2.tasks.gsm8k``: a program computing the annotated steps,
   the sandbox's output, the gold answer); those that cannot are dropped and counted. The
   evaluation set is a fixed seeded subset of GSM8K test (or all of it).
2. **SFT**, then the **curriculum**: the RL pool's easiest ``rl_candidates`` variants (fewest
   steps first) are sampled ``pass_rate_samples`` times each by the SFT model, as RL samples
   them; those it solves sometimes but not always (0 < p < 1, ``split_by_pass_rate``) are the
   RL problems, easiest first (``data.shuffle: false`` keeps that order).
3. **GRPO-RoC and evaluation** as ``rstar2 demo`` (``train_and_evaluate``): greedy, with the
   tool, for the base, SFT-only and final models, each with its bootstrap interval, tool-call
   rate and tool-error ratio; the final model's gain over the SFT model with a paired
   bootstrap interval; the pass rate and the share of groups with signal of every RL step; the
   wall time of every phase.

The recipe is one YAML file: a ``gsm8k:`` section for this pipeline (``GSM8KSettings``) and the
RL run's ``RunConfig`` sections, both open to ``--set`` (``gsm8k.sft.epochs=2``,
``rl.roc.mode=off``); on a GPU only sizes change. Everything lands in ``runs/<name>/`` as in
the demo, plus ``data/decontamination.json`` with the overlaps it removed, the candidates and
their pass rates (``data/rl_candidates.jsonl``, ``eval/pass_rate/``), and the RL run's resolved
``config.yaml`` (``rstar2 train runs/<name>/config.yaml --resume`` continues a killed RL phase).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from tqdm import tqdm

from rstar2 import RECIPES
from rstar2.agent.prompt import ChatFormat
from rstar2.agent.rollout import Agent
from rstar2.data import (
    DataError,
    Overlap,
    Problem,
    find_overlaps,
    load_benchmark,
    read_problems,
    write_jsonl,
)
from rstar2.data.difficulty import split_by_pass_rate
from rstar2.demo.pipeline import (
    Evaluator,
    load_pipeline_recipe,
    machine_dtypes,
    run_pipeline,
    train_and_evaluate,
)
from rstar2.eval.launch import agent_solver
from rstar2.eval.runner import SAMPLES_JSONL, EvalSettings, run_eval
from rstar2.models.loading import load_tokenizer
from rstar2.reward import Grader
from rstar2.run.config import RunConfig
from rstar2.sandbox import SandboxClient
from rstar2.sft.config import SFTSettings
from rstar2.sft.dataset import write_traces
from rstar2.tasks.gsm8k import gsm8k_traces, step_count
from rstar2.tasks.gsm8k_variants import number_variants
from rstar2.training.runlog import read_metrics

RECIPE = RECIPES / "gsm8k-cpu.yaml"
SECTION = "gsm8k"


class GSM8KSettings(BaseModel):
    """The recipe's ``gsm8k:`` section: the data and the phases around the RL run."""

    model_config = ConfigDict(extra="forbid")

    train: str = Field("gsm8k_train", description="GSM8K train: the packaged copy by name, or a "
                       "JSONL file of rows with id, problem, answer and the annotated solution.")
    test: str = Field("gsm8k", description="The evaluation benchmark (a registered name or a JSONL "
                      "path); the training set is decontaminated against it.")
    sft_problems: int = Field(0, ge=0, description="Train problems drawn for SFT traces (0: all of "
                              "them; the traces kept are fewer: see data.dropped in the summary).")
    sft_variants: int = Field(1, ge=0, description="Number-substitution variants of each SFT "
                              "problem traced too (more SFT data from the same annotations).")
    rl_candidates: int = Field(240, ge=1, description="Fresh variants, fewest steps first, whose "
                               "pass rate under the SFT model is estimated; those with 0 < p < 1 "
                               "are the RL problems.")
    pass_rate_samples: int = Field(4, ge=2, description="Samples per candidate for its pass rate "
                                   "(at the RL rollouts' temperature and limits).")
    rl_train: str | None = Field(None, description="Skip the pass-rate estimate: RL on this "
                                 "problem file (an earlier run's data/rl_train.jsonl), e.g. to "
                                 "compare RoC on and off on the same problems.")
    broken_share: float = Field(0.0, ge=0, le=1, description="Share of SFT traces whose first "
                                "program fails in the sandbox and is fixed.")
    sft: SFTSettings = Field(default_factory=lambda: SFTSettings(epochs=1, batch_size=16, lr=2e-4, warmup_steps=10),
                             description="The cold-start SFT.")
    sft_model: str | None = Field(None, description="Skip the base evaluation and the SFT: start "
                                  "RL from this model directory (an earlier run's sft/final), e.g. "
                                  "to compare RoC on and off from one start.")
    eval_problems: int = Field(500, ge=0, description="Fixed random subset of the test set "
                               "evaluated (0: all of it).")
    eval_seed: int = Field(0, description="Seeds the evaluation subset.")
    eval_max_tokens: int = Field(256, ge=16, description="Token budget of an evaluation answer.")
    eval_max_turns: int = Field(3, ge=1, description="Assistant turns of an evaluation answer.")


@dataclass(frozen=True)
class GSM8KSplits:
    sft: list[Problem]
    """Decontaminated train problems drawn for SFT, in the seeded order."""
    evaluation: list[Problem]
    decontamination: dict
    """Counts and a few examples of the train rows that overlap the test set (removed)."""
    overlaps: list[Overlap]


def load_recipe(path: str | Path = RECIPE, overrides: Sequence[str] = (), name: str | None = None
                ) -> tuple[GSM8KSettings, RunConfig]:
    """The recipe's two parts (``load_pipeline_recipe``)."""
    return load_pipeline_recipe(path, overrides, name, SECTION, GSM8KSettings)


def gsm8k_splits(settings: GSM8KSettings, seed: int) -> GSM8KSplits:
    """Decontaminated SFT problems and the evaluation subset (module docstring)."""
    train = load_benchmark(settings.train).problems
    test = load_benchmark(settings.test)
    overlaps = find_overlaps(train, [test])
    flagged = {overlap.id for overlap in overlaps}
    clean = [problem for problem in train if problem.id not in flagged]
    wanted = settings.sft_problems or len(clean)
    if wanted > len(clean):
        raise DataError(f"{settings.train}: {len(clean)} problems after decontamination, "
                        f"fewer than gsm8k.sft_problems = {wanted}")
    order = np.random.default_rng([seed, 8]).permutation(len(clean))
    count = settings.eval_problems or len(test.problems)
    picked = np.random.default_rng(settings.eval_seed).choice(len(test.problems), min(count, len(test.problems)),
                                                              replace=False)
    report = {"train_rows": len(train), "against": test.name, "overlapping_rows": len(overlaps),
              "kept_rows": len(clean), "examples": [o.to_row() for o in overlaps[:5]]}
    return GSM8KSplits(sft=[clean[i] for i in order[:wanted]], evaluation=[test.problems[i] for i in sorted(picked)],
                       decontamination=report, overlaps=overlaps)


def easiest_first(problems: Sequence[Problem], count: int) -> list[Problem]:
    """The ``count`` problems of fewest steps (those with a program), in the given order within
    a step count."""
    return sorted((p for p in problems if step_count(p) is not None), key=step_count)[:count]


def run_gsm8k(recipe: str | Path = RECIPE, overrides: Sequence[str] = (), name: str | None = None,
              console: Console | None = None) -> dict:
    """Run the whole GSM8K recipe (module docstring); returns the summary also in summary.json."""
    console = console or Console()
    settings, config = load_recipe(recipe, overrides, name)
    load_benchmark(settings.train)  # a missing file is refused before the pipeline starts,
    if settings.rl_train:  # and so is a missing RL file, not after the SFT and its evaluation
        read_problems(settings.rl_train)
    config = machine_dtypes(config, console)
    return run_pipeline(config, lambda url, grader, out: phases(settings, config, url, grader, out), console)


@dataclass(frozen=True)
class GSM8KData:
    """What the data phase made: the traces, the RL candidates, the evaluation file, counts."""

    traces: Path
    """The SFT traces as chat-format conversations (what ``run_sft`` reads)."""
    candidates: list[Problem]
    evaluation: Path
    counts: dict


async def build_data(settings: GSM8KSettings, config: RunConfig, tokenizer, sandbox, console: Console) -> GSM8KData:
    """Splits, variants, traces and RL candidates, written to ``<run>/data`` (module docstring)."""
    data_dir = config.run_dir / "data"
    splits = gsm8k_splits(settings, config.seed)
    training = not settings.sft_model
    varied = splits.sft if training or not settings.rl_train else []
    with tqdm(total=len(varied), desc="variants", unit="problem", dynamic_ncols=True) as bar:
        variants = await number_variants(varied, sandbox, per_problem=settings.sft_variants + 1,
                                         seed=config.seed, on_done=bar.update)
    index = {v.id: int(v.id.rpartition("-v")[2]) for v in variants.variants}
    sft_variants = [v for v in variants.variants if index[v.id] <= settings.sft_variants]
    traced = splits.sft + sft_variants if training else []
    with tqdm(total=len(traced), desc="traces", unit="trace", dynamic_ncols=True) as bar:
        built = await gsm8k_traces(traced, tokenizer, sandbox, config.rollout.prompt,
                                   settings.broken_share, config.seed, on_done=bar.update)
    candidates = easiest_first([v for v in variants.variants if index[v.id] > settings.sft_variants],
                               settings.rl_candidates)
    traces = write_traces(data_dir / "sft_traces.jsonl", [p.id for p in built.kept], [p.problem for p in built.kept],
                          built.traces, ChatFormat(tokenizer, config.rollout.prompt).end_of_turn)
    write_jsonl(data_dir / "sft_problems.jsonl", (dict(p.row, id=p.id) for p in built.kept))
    write_jsonl(data_dir / "rl_candidates.jsonl", (p.row for p in candidates))
    evaluation = data_dir / "gsm8k_test_eval.jsonl"
    write_jsonl(evaluation, (dict(p.row, id=p.id) for p in splits.evaluation))
    write_jsonl(data_dir / "decontamination.overlaps.jsonl", (o.to_row() for o in splits.overlaps))
    (data_dir / "decontamination.json").write_text(json.dumps(splits.decontamination, indent=2) + "\n")
    counts = {"sft_problems": len(splits.sft), "sft_variants": len(sft_variants), "sft_traces": len(built.traces),
              "dropped": dict(built.dropped), "variant_drops": dict(variants.dropped),
              "rl_candidates": len(candidates), "eval_problems": len(splits.evaluation),
              "decontamination": {k: v for k, v in splits.decontamination.items() if k != "examples"}}
    console.print(f"[bold]data[/]: {len(built.traces)} SFT traces of {len(splits.sft)} problems and "
                  f"{len(sft_variants)} number-substitution variants (dropped {counts['dropped'] or 'none'}; "
                  f"problems without variants {counts['variant_drops'] or 'none'}), {len(candidates)} RL "
                  f"candidates, {len(splits.evaluation)} test problems; {len(splits.overlaps)} train rows "
                  f"overlapping {splits.decontamination['against']} removed first", highlight=False)
    return GSM8KData(traces=traces, candidates=candidates, evaluation=evaluation, counts=counts)


async def phases(settings: GSM8KSettings, config: RunConfig, url: str, grader: Grader, console: Console) -> dict:
    tokenizer = load_tokenizer(config.model.path)
    timings: dict[str, float] = {}
    curriculum: dict = {}
    async with SandboxClient([url]) as sandbox:
        clock = time.perf_counter()
        data = await build_data(settings, config, tokenizer, sandbox, console)
        timings["data"] = time.perf_counter() - clock

        async def choose(evaluate: Evaluator) -> None:
            clock = time.perf_counter()
            curriculum.update(await rl_problems(settings, config, data.candidates, evaluate, tokenizer, sandbox,
                                                console))
            timings["pass_rate"] = time.perf_counter() - clock

        summary = await train_and_evaluate(settings, config, tokenizer, sandbox, url, grader, data.traces,
                                           data.evaluation, timings, console, before_rl=choose)
    total = len(load_benchmark(settings.test).problems)
    rows = read_metrics(config.run_dir)
    return {"evaluated_on": f"{settings.test} ({data.counts['eval_problems']} of {total})", "data": data.counts,
            "curriculum": curriculum, **summary,
            "rl_pass_rate_per_step": [row["reward/accuracy"] for row in rows]}


async def rl_problems(settings: GSM8KSettings, config: RunConfig, candidates: list[Problem], evaluate: Evaluator,
                      tokenizer, sandbox, console: Console) -> dict:
    """Write the RL problems to ``data.train``: ``gsm8k.rl_train`` as given, else the candidates
    the SFT model (in ``evaluate``'s engine) solves in some but not all of k samples, easiest
    first; returns the counts."""
    target = Path(config.data.train)
    if settings.rl_train:
        problems = read_problems(settings.rl_train)
        write_jsonl(target, (dict(p.row, id=p.id) for p in problems))
        console.print(f"[bold]curriculum[/]: {len(problems)} RL problems from {settings.rl_train}", highlight=False)
        return {"from": settings.rl_train, "rl_problems": len(problems)}
    k = settings.pass_rate_samples
    source = config.run_dir / "data" / "rl_candidates.jsonl"
    rollout = config.rollout  # the RL run's own rollouts, sampled from the SFT model
    solve = agent_solver(Agent(evaluate.engine, tokenizer, sandbox, rollout))
    bench = load_benchmark(str(source))
    out = config.run_dir / "eval" / "pass_rate"
    sampling = EvalSettings(benchmarks=[str(source)], n=k, temperature=rollout.temperature, top_p=rollout.top_p,
                            max_tokens=rollout.max_response_tokens, max_turns=rollout.max_turns,
                            prompt=rollout.prompt.variant, tool_name=rollout.prompt.tool_name,
                            concurrency=evaluate.settings.concurrency)
    await run_eval(sampling, [bench], solve, out, reward=evaluate.grader)
    split = split_by_pass_rate(candidates, out / SAMPLES_JSONL, bench.name)
    kept = sorted(split.kept, key=lambda p: (step_count(p) or 0, -split.pass_rates[p.id]))
    steps = sorted({step_count(p) or 0 for p in candidates})
    console.print(f"[bold]curriculum[/]: {len(candidates)} candidates of {steps[0]}-{steps[-1]} steps, {k} samples "
                  f"each: {len(kept)} solved sometimes (RL problems, easiest first), {len(split.always)} always, "
                  f"{len(split.never)} never; mean pass rate {np.mean(list(split.pass_rates.values())):.2f}",
                  highlight=False)
    if not kept:  # a run is not thrown away after its SFT; it says what RL will lack
        console.print(f"[yellow]no candidate has 0 < p < 1: RL runs on all {len(candidates)} candidates, where "
                      "few groups will carry a signal (raise gsm8k.rl_candidates, or train the SFT longer)[/]")
        kept = sorted(candidates, key=lambda p: (step_count(p) or 0, -split.pass_rates[p.id]))
    write_jsonl(target, (dict(p.row, pass_rate=split.pass_rates[p.id]) for p in kept))
    return {"candidates": len(candidates), "samples_each": k, "rl_problems": len(kept), "sometimes": len(split.kept),
            "always": len(split.always),
            "never": len(split.never), "candidate_steps": [steps[0], steps[-1]],
            "mean_pass_rate": float(np.mean(list(split.pass_rates.values())))}

