"""The root `rstar2` Typer app; each module of `rstar2.cli` adds its verbs to it."""

import typer

app = typer.Typer(
    name="rstar2",
    help="Train and evaluate language models that reason with a Python tool (rStar2-Agent).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
