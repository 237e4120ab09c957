"""`rstar2 demo`: the paper's recipe in miniature (SFT, GRPO-RoC, evaluation) on CPU."""

from __future__ import annotations

import typer

from rstar2.cli.app import app


@app.command()
def demo(
    name: str = typer.Option(None, "--name", help="Run folder under runs/ (default: cpu-demo)."),
    overrides: list[str] = typer.Option(None, "--set", help="Dotted override of the RL recipe "
                                        "(recipes/cpu-demo.yaml), e.g. --set rl.roc.mode=off."),
    sft_model: str = typer.Option(None, "--sft-model", help="Skip the SFT and start RL from this model "
                                  "directory (an earlier demo's runs/<name>/sft), e.g. to compare RL settings."),
) -> None:
    """Teach SmolLM2-135M-Instruct to solve arithmetic with the Python tool, in about 20 minutes
    on 2 CPU cores: (1) a short SFT on tool-use traces made with the real sandbox, (2) GRPO-RoC
    on harder problems of the same families, (3) held-out accuracy of the base, SFT-only and
    final models, and a PNG of the RL curves. Prints where everything is."""
    from rstar2.demo.pipeline import DemoSettings, run_demo

    try:
        run_demo(DemoSettings(name=name, overrides=list(overrides or []), sft_model=sft_model))
    except FileExistsError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
