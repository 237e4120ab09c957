"""`rstar2 demo`: the paper's recipe in miniature (SFT, GRPO-RoC, evaluation) on CPU or one GPU."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError

from rstar2 import RECIPES
from rstar2.cli.app import app, fail
from rstar2.cli.options import RecipeDevice, Threads, announce_device, one_of
from rstar2.cli.train import refuse_missing_logger

NAMED_RECIPES = {"cpu-demo": RECIPES / "cpu-demo.yaml", "gsm8k": RECIPES / "gsm8k-cpu.yaml",
                 "gsm8k-gpu": RECIPES / "gsm8k-gpu.yaml"}


@app.command()
def demo(
    recipe: str = typer.Option("cpu-demo", "--recipe", metavar="RECIPE", help="'cpu-demo' (generated arithmetic), 'gsm8k' "
                               "(GSM8K train -> GSM8K test, recipes/gsm8k-cpu.yaml), 'gsm8k-gpu' (the "
                               "same on one GPU with all the data, recipes/gsm8k-gpu.yaml), or a recipe "
                               "file; one with a `gsm8k:` section runs the GSM8K pipeline."),
    name: str = typer.Option(None, "--name", metavar="NAME", help="Run folder under runs/ (default: the recipe's name)."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help="Dotted override of the recipe, "
                                        "e.g. --set rl.roc.mode=off --set rl.steps=20; the demo's data sizes "
                                        "under demo. (--set demo.heldout_problems=300), the GSM8K recipe's under gsm8k."),
    sft_model: str = typer.Option(None, "--sft-model", metavar="DIR", help="Skip the SFT and start RL from this model "
                                  "directory (an earlier demo's runs/<name>/sft/final), e.g. to compare RL settings."),
    sft_dtype: str = typer.Option(None, "--sft-dtype", **one_of(("auto", "float32", "bfloat16"), "SFT dtype"),
                                  help="Compute dtype of the SFT's matmuls (default: auto, chosen for "
                                  "this CPU at start; the RL phase's is the recipe's model.compute_dtype)."),
    device: RecipeDevice = None,
    threads: Threads = None,
) -> None:
    """Teach SmolLM2-135M-Instruct to solve problems with the Python tool on a CPU:
    (1) a short SFT on tool-use traces made with the real sandbox, (2) GRPO-RoC on problems the
    SFT never saw, (3) greedy accuracy of the base, SFT-only and final models with the tool, and
    a PNG of the RL curves. The default recipe uses generated arithmetic;
    `--recipe gsm8k` trains on GSM8K train and evaluates on GSM8K test. Prints where everything is."""
    from rstar2.demo.gsm8k import SECTION as GSM8K_SECTION
    from rstar2.demo.gsm8k import run_gsm8k
    from rstar2.demo.pipeline import SECTION as DEMO_SECTION
    from rstar2.demo.pipeline import run_demo
    from rstar2.run.recipe import read_recipe
    from rstar2.training.config import LoggingConfig

    path = NAMED_RECIPES.get(recipe, Path(recipe))
    settings = [*(overrides or []), *([f"model.device={device}"] if device else [])]
    try:
        tree = read_recipe(path, settings)
        refuse_missing_logger(LoggingConfig.model_validate(tree.get("logging") or {}))
        announce_device(str((tree.get("model") or {}).get("device", "auto")))
        section = GSM8K_SECTION if GSM8K_SECTION in tree else DEMO_SECTION
        extra = [f"{section}.sft_model={sft_model}"] if sft_model else []
        extra += [f"{section}.sft.compute_dtype={sft_dtype}"] if sft_dtype else []
        run = run_gsm8k if section == GSM8K_SECTION else run_demo
        run(path, settings + extra, name)
    except (FileExistsError, ValidationError) as error:
        fail(error)
