"""``rstar2 demo --recipe gsm8k``: the demo's pipeline on real problems nobody here wrote.

    summary = run_gsm8k("recipes/gsm8k-cpu.yaml", overrides=["rl.steps=20"])

1. **Data.** GSM8K train is decontaminated against the test set (8-gram overlap, the paper's
   rule, ``rstar2.data.find_overlaps`` as ``rstar2 data decontaminate``); a seeded shuffle of
   what is left gives the SFT problems and, after them, the RL problems (disjoint by id). The
   SFT problems become traces through the real agent loop and sandbox (``rstar2.sft.gsm8k``:
   the solution's text as ``<reason>``, a program computing the annotated steps, the sandbox's
   output, the gold answer); the ones that cannot are dropped and counted. The evaluation set
   is a fixed seeded subset of GSM8K test (or all of it).
2. **SFT, GRPO-RoC, evaluation** exactly as ``rstar2 demo`` (``train_and_evaluate``): greedy,
   with the tool, for the base, SFT-only and final models, each with its bootstrap interval,
   tool-call rate and tool-error ratio, and the wall time of every phase.

The recipe is one YAML file: a ``gsm8k:`` section for this pipeline (``GSM8KSettings``) and the
RL run's ``RunConfig`` sections, both open to ``--set`` (``gsm8k.sft.epochs=2``,
``rl.roc.mode=off``); on a GPU only sizes change. Everything lands in ``runs/<name>/`` as in
the demo, plus ``data/decontamination.json`` with the overlaps it removed, and the RL run's
resolved ``config.yaml`` (``rstar2 train runs/<name>/config.yaml --resume`` continues a killed
RL phase).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console

from rstar2 import RECIPES
from rstar2.agent.prompt import ChatFormat
from rstar2.data import DataError, Overlap, Problem, find_overlaps, load_benchmark, read_problems, write_jsonl
from rstar2.data.benchmarks import benchmark_path
from rstar2.engines.loading import load_tokenizer
from rstar2.reward import Grader
from rstar2.run.config import RunConfig
from rstar2.recipe import ConfigError, describe_error, read_recipe
from rstar2.run.recipe import validate_config
from rstar2.sandbox import SandboxClient
from rstar2.sft.dataset import write_traces
from rstar2.sft.gsm8k import gsm8k_traces
from rstar2.sft.train import SFTSettings
from rstar2.demo.pipeline import run_pipeline, train_and_evaluate

RECIPE = RECIPES / "gsm8k-cpu.yaml"
SECTION = "gsm8k"


class GSM8KSettings(BaseModel):
    """The recipe's ``gsm8k:`` section: the data and the phases around the RL run."""

    model_config = ConfigDict(extra="forbid")

    train: str = Field("gsm8k_train", description="GSM8K train: the packaged copy by name, or a "
                       "JSONL file of rows with id, problem, answer and the annotated solution.")
    test: str = Field("gsm8k", description="The evaluation benchmark (a registered name or a JSONL "
                      "path); both training sets are decontaminated against it.")
    sft_problems: int = Field(1000, ge=1, description="Problems drawn for SFT traces (the traces "
                              "kept are fewer: see data.dropped in the summary).")
    rl_problems: int = Field(1000, ge=1, description="Problems drawn for the RL phase, after the "
                             "SFT's in the same shuffle (disjoint).")
    broken_share: float = Field(0.1, ge=0, le=1, description="Share of SFT traces whose first "
                                "program fails in the sandbox and is fixed.")
    sft: SFTSettings = Field(default_factory=lambda: SFTSettings(
        epochs=1, batch_size=8, lr=1e-4, warmup_steps=5, compute_dtype="bfloat16"),
        description="The cold-start SFT.")
    sft_model: str | None = Field(None, description="Skip the base evaluation and the SFT: start "
                                  "RL from this model directory (an earlier run's sft/final), e.g. "
                                  "to compare RoC on and off from one start.")
    eval_problems: int = Field(500, ge=0, description="Fixed random subset of the test set "
                               "evaluated (0: all of it).")
    eval_seed: int = Field(0, description="Seeds the evaluation subset.")
    eval_max_tokens: int = Field(384, ge=16, description="Token budget of an evaluation answer.")
    eval_max_turns: int = Field(3, ge=1, description="Assistant turns of an evaluation answer.")


@dataclass(frozen=True)
class GSM8KSplits:
    sft: list[Problem]
    rl: list[Problem]
    evaluation: list[Problem]
    decontamination: dict
    """Counts and a few examples of the train rows that overlap the test set (removed)."""
    overlaps: list[Overlap]


def load_recipe(path: str | Path = RECIPE, overrides: Sequence[str] = (), name: str | None = None
                ) -> tuple[GSM8KSettings, RunConfig]:
    """The recipe's two parts; the RL run trains on the run's own ``data/rl_train.jsonl`` and
    starts from ``gsm8k.sft_model`` when one is given."""
    tree = read_recipe(path, overrides)
    try:
        settings = GSM8KSettings.model_validate(tree.pop(SECTION, None) or {})
    except ValidationError as error:
        lines = [f"{SECTION}.{describe_error(problem, GSM8KSettings)}" for problem in error.errors()]
        raise ConfigError(f"{path}: " + "; ".join(lines)) from None
    tree["name"] = name or tree.get("name")
    runs_dir = tree.get("runs_dir", "runs")
    tree.setdefault("data", {})["train"] = str(Path(runs_dir) / str(tree["name"]) / "data" / "rl_train.jsonl")
    if settings.sft_model:
        tree.setdefault("model", {})["path"] = settings.sft_model
    return settings, validate_config(tree, source=str(path))


def gsm8k_splits(settings: GSM8KSettings, seed: int) -> GSM8KSplits:
    """Decontaminated, disjoint SFT and RL problems and the evaluation subset (module docstring)."""
    train = read_problems(benchmark_path(settings.train))
    test = load_benchmark(settings.test)
    overlaps = find_overlaps(train, [test])
    flagged = {overlap.id for overlap in overlaps}
    clean = [problem for problem in train if problem.id not in flagged]
    wanted = settings.sft_problems + settings.rl_problems
    if wanted > len(clean):
        raise DataError(f"{settings.train}: {len(clean)} problems after decontamination, "
                        f"fewer than gsm8k.sft_problems + gsm8k.rl_problems = {wanted}")
    order = np.random.default_rng([seed, 8]).permutation(len(clean))
    sft = [clean[i] for i in order[:settings.sft_problems]]
    rl = [clean[i] for i in order[settings.sft_problems:wanted]]
    count = settings.eval_problems or len(test.problems)
    picked = np.random.default_rng(settings.eval_seed).choice(len(test.problems), min(count, len(test.problems)),
                                                              replace=False)
    report = {"train_rows": len(train), "against": test.name, "overlapping_rows": len(overlaps),
              "kept_rows": len(clean), "examples": [o.to_row() for o in overlaps[:5]]}
    return GSM8KSplits(sft=sft, rl=rl, evaluation=[test.problems[i] for i in sorted(picked)],
                       decontamination=report, overlaps=overlaps)


def run_gsm8k(recipe: str | Path = RECIPE, overrides: Sequence[str] = (), name: str | None = None,
              console: Console | None = None) -> dict:
    """Run the whole GSM8K recipe (module docstring); returns the summary also in summary.json."""
    settings, config = load_recipe(recipe, overrides, name)
    benchmark_path(settings.train)  # a missing file is refused before the pipeline starts
    return run_pipeline(config, lambda url, grader, out: phases(settings, config, url, grader, out), console)


async def phases(settings: GSM8KSettings, config: RunConfig, url: str, grader: Grader, console: Console) -> dict:
    data_dir = config.run_dir / "data"
    prompt = config.rollout.prompt
    tokenizer = load_tokenizer(config.model.path)
    timings: dict[str, float] = {}
    async with SandboxClient([url]) as sandbox:
        clock = time.perf_counter()
        splits = gsm8k_splits(settings, config.seed)
        built = await gsm8k_traces([] if settings.sft_model else splits.sft, tokenizer, sandbox, prompt,
                                   settings.broken_share, config.seed)
        traces = write_traces(data_dir / "sft_traces.jsonl", [p.id for p in built.kept],
                              [p.problem for p in built.kept], built.traces, ChatFormat(tokenizer, prompt).end_of_turn)
        write_jsonl(data_dir / "sft_problems.jsonl", (dict(p.row, id=p.id) for p in built.kept))
        write_jsonl(Path(config.data.train), (dict(p.row, id=p.id) for p in splits.rl))
        evaluation = data_dir / "gsm8k_test_eval.jsonl"
        write_jsonl(evaluation, (dict(p.row, id=p.id) for p in splits.evaluation))
        write_jsonl(data_dir / "decontamination.overlaps.jsonl", (o.to_row() for o in splits.overlaps))
        (data_dir / "decontamination.json").write_text(json.dumps(splits.decontamination, indent=2) + "\n")
        timings["data"] = time.perf_counter() - clock
        data = {"sft_problems": len(splits.sft), "sft_traces": len(built.traces), "dropped": dict(built.dropped),
                "rl_problems": len(splits.rl), "eval_problems": len(splits.evaluation),
                "decontamination": {k: v for k, v in splits.decontamination.items() if k != "examples"}}
        console.print(f"[bold]data[/]: {data['sft_traces']} SFT traces of {data['sft_problems']} problems "
                      f"(dropped {data['dropped'] or 'none'}), {data['rl_problems']} RL problems, "
                      f"{data['eval_problems']} test problems; {len(splits.overlaps)} train rows overlapping "
                      f"{splits.decontamination['against']} removed first")
        summary = await train_and_evaluate(settings, config, tokenizer, sandbox, url, grader, traces,
                                           evaluation, timings, console)
    total = len(load_benchmark(settings.test).problems)
    return {"evaluated_on": f"{settings.test} ({len(splits.evaluation)} of {total})", "data": data, **summary}
