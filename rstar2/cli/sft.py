"""`rstar2 sft RECIPE.yaml`: supervised fine-tuning on tool-use conversations, with dotted
overrides and resume."""

from __future__ import annotations

from pathlib import Path

import typer

from rstar2.cli.app import app
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
def sft(
    recipe: Path = typer.Argument(..., exists=True, dir_okay=False, metavar="RECIPE", help="YAML SFT recipe, e.g. "
                                  "recipes/qwen3-1.7b-sft.yaml."),
    overrides: Overrides = None,
    resume: Resume = False,
    name: RunName = None,
    out: RunOut = None,
    device: RecipeDevice = None,
    threads: Threads = None,
) -> None:
    """Fine-tune a model on multi-turn tool-use conversations (chat-format JSONL, docs/sft.md):
    the loss is on the assistant's tokens only; prompts, tool outputs and template separators
    are context.

    Everything goes to runs/<name>/ (or --out): config.yaml, metrics.jsonl, checkpoints/ and, at the end,
    final/ (a model directory with its rstar2.json card, for `rstar2 train`, `chat` and `eval`).
    """
    from rstar2.sft.config import load_sft_config
    from rstar2.sft.run import run_sft

    config = load_sft_config(recipe, recipe_overrides(overrides, name, device, out))
    announce_device(config.model.device)
    final = run_sft(config, resume=resume)
    typer.echo(f"done: metrics in {config.run_dir / 'metrics.jsonl'}, trained model in {final}")
