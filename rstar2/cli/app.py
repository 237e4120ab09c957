"""The root `rstar2` Typer app, the sub-command groups' constructor, and the one error exit.

Help is click's plain layout (``rich_markup_mode=None``): rich's option table gives each
option's help a narrow column in an 80-column terminal, click's wraps it at full width. The
usage line names arguments as their help does (``rstar2 train [OPTIONS] RECIPE``), where typer
would write ``{RECIPE}``.
"""

import os
import sys
from typing import NoReturn

import typer
from typer.core import TyperCommand, TyperGroup

import rstar2
from rstar2.errors import Rstar2Error
from rstar2.models.memory import keep_freed_memory


class ReportsErrors:
    """An ``Rstar2Error`` a command (or a group's callback) raises ends it as one ``error:``
    line with the error's exit status, whichever command and whichever error."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Rstar2Error as error:
            fail(error, error.exit_code)


class ReportingGroup(ReportsErrors, TyperGroup):
    """A command group that reports errors as its commands do."""


class PlainUsageCommand(ReportsErrors, TyperCommand):
    """A command whose usage line writes a required argument as ``NAME``, an optional one as
    ``[NAME]``, and whose argument list names each argument alone: the conventions of every
    Unix manual, which users read without a legend (typer writes ``{NAME}`` and
    ``NAME <path>``)."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                pieces.append(argument_name(param) if param.required else f"[{argument_name(param)}]")
        return pieces

    def format_options(self, ctx, formatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"argument": [], "option": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.param_type_name in sections:
                name = argument_name(param) if param.param_type_name == "argument" else record[0]
                sections[param.param_type_name].append((name, record[1]))
        for title, records in (("Arguments", sections["argument"]), ("Options", sections["option"])):
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


def argument_name(param) -> str:
    """How help names an argument: its metavar (``RECIPE``), else its name in capitals."""
    return param.metavar or param.name.upper()


class App(typer.Typer):
    """A Typer app whose commands are ``PlainUsageCommand``s and whose groups report errors."""

    def __init__(self, *args, cls: type[TyperGroup] = ReportingGroup, **settings):
        super().__init__(*args, cls=cls, **settings)

    def command(self, *args, cls: type[TyperCommand] = PlainUsageCommand, **settings):
        return super().command(*args, cls=cls, **settings)


app = App(
    name="rstar2",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


def show_version(asked: bool) -> None:
    if asked:
        typer.echo(f"rstar2 {rstar2.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=show_version,
                                 help="Print rstar2's version and exit."),
) -> None:
    """Train and evaluate language models that reason with a Python tool (rStar2-Agent)."""
    import_from_working_directory()
    keep_freed_memory()


def import_from_working_directory() -> None:
    """Let ``module:function`` settings (``rl.reward``, ``rollout.tools``) name a module in the
    directory the command runs from, as ``python -m`` and ``python script.py`` would: a
    ``my_rewards.py`` beside the recipe is found without ``PYTHONPATH``. Appended, so an
    installed package of the same name still wins."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def command_group(name: str, help: str, **settings) -> typer.Typer:
    """A sub-command group (``rstar2 eval``, ``rstar2 data`` ...) added to the root, with its
    help layout."""
    group = App(help=help, rich_markup_mode=None, **settings)
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
