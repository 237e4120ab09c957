"""The root `rstar2` Typer app, the sub-command groups' constructor, and the one error exit.

Help is click's plain layout (``rich_markup_mode=None``): rich's option table gives each
option's help a narrow column in an 80-column terminal, click's wraps it at full width.
"""

from typing import NoReturn

import typer

app = typer.Typer(
    name="rstar2",
    help="Train and evaluate language models that reason with a Python tool (rStar2-Agent).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


def command_group(name: str, help: str, **settings) -> typer.Typer:
    """A sub-command group (``rstar2 eval``, ``rstar2 data`` ...) added to the root, with its
    help layout."""
    group = typer.Typer(help=help, rich_markup_mode=None, **settings)
    app.add_typer(group, name=name)
    return group


def fail(message: object, code: int = 2) -> NoReturn:
    """Stop the command with one line on stderr (``error: ...``) and exit ``code``: the one
    way every command reports bad input, never with a traceback. A pydantic validation error
    becomes ``field: problem; ...``."""
    from pydantic import ValidationError

    if isinstance(message, ValidationError):
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in message.errors())
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
