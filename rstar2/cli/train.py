"""`rstar2 train RECIPE.yaml`: a GRPO-RoC run from a recipe, with dotted overrides and resume."""

from __future__ import annotations

from pathlib import Path

import typer

from rstar2.cli.app import app, fail
from rstar2.cli.options import (
    Overrides,
    RecipeDevice,
    Resume,
    RunName,
    RunOut,
    Threads,
    announce_device,
    recipe_overrides,
)


@app.command()
def train(
    recipe: Path = typer.Argument(..., exists=True, dir_okay=False, metavar="RECIPE", help="YAML recipe, e.g. "
                                  "recipes/cpu-demo.yaml or recipes/qwen3-14b-stage1.yaml."),
    overrides: Overrides = None,
    resume: Resume = False,
    name: RunName = None,
    out: RunOut = None,
    plan: bool = typer.Option(False, "--plan", help="Print the cluster: section's placement, the "
                              "per-GPU memory estimate and the rollouts in flight, then exit "
                              "without starting anything (no GPU, model or Ray needed)."),
    device: RecipeDevice = None,
    threads: Threads = None,
) -> None:
    """Train with GRPO-RoC: rollouts with the recipe's tools (the Python sandbox by default),
    its reward (the built-in verifier by default), Resample-on-Correct, clipped loss.

    Everything goes to runs/<name>/ (or --out): metrics.jsonl, rollouts/step_N.jsonl, checkpoints/ and,
    at the end, final/ (a model directory for `rstar2 chat --model` and `rstar2 eval --model`).
    A run that stops because it learned nothing for rl.max_silent_steps steps (every group's
    rollouts scored alike, or every reward call failed) says why in one error line and exits 1;
    input refused before the run starts exits 2.
    """
    from rstar2.data import DataError
    from rstar2.run import training
    from rstar2.run.recipe import load_config

    config = load_config(recipe, recipe_overrides(overrides, name, device, out))
    if plan:
        print_plan(config)
        return
    refuse_missing_logger(config.logging)
    announce_device(config.model.device)
    try:
        final = training.train(config, resume=resume)
    except DataError as error:  # data.train or data.keep_ids
        fail(f"{error}{training_data_hint(config)}")
    except ImportError as error:  # an extra is missing
        fail(error)
    typer.echo(f"done: metrics in {config.run_dir / 'metrics.jsonl'}, trained model in {final}")


def refuse_missing_logger(logging) -> None:
    """Stop in one line, before any model loads, when a logger the recipe asks for (TensorBoard,
    Weights & Biases) is not installed."""
    from rstar2.training.runlog import missing_logger

    problem = missing_logger(logging)
    if problem is not None:
        fail(problem)


def training_data_hint(config) -> str:
    """What to do about a missing ``data.train``: a file under the runs folder is written by an
    earlier run (``recipes/cpu-demo.yaml`` trains on what ``rstar2 demo`` writes); any other is
    the user's to point at their problems."""
    train = Path(config.data.train)
    if train.exists():
        return ""
    yours = "point data.train at your own problems (--set data.train=PATH, JSONL rows of id, problem, answer)"
    if Path(config.runs_dir).resolve() in train.resolve().parents:
        return ("; it is written by an earlier run (recipes/cpu-demo.yaml trains on what `rstar2 demo` "
                f"writes): run that first, or {yours}")
    return f"; {yours}"


def print_plan(config) -> None:
    """``--plan``: the placement and memory of the recipe's cluster or of its one process, or a
    one-line refusal."""
    from rstar2.run.plan import run_plan

    typer.echo(run_plan(config))
