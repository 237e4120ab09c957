"""One root for the errors rstar2 raises, and one way the command reports them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import rstar2
from rstar2.cli.app import App
from rstar2.errors import Rstar2Error
from rstar2.recipe import ConfigError
from rstar2.rl.silence import NothingLearned

OPTIONAL = {"ray", "vllm", "wandb", "tensorboard", "pyarrow"}
"""The packages of pyproject's extras a module may need; without one installed, its module is
not checked here (a missing required package still fails the test)."""


def rstar2_exception_classes() -> list[type[BaseException]]:
    found, skipped = [], []
    for info in pkgutil.walk_packages(rstar2.__path__, "rstar2."):
        if info.name == "rstar2.__main__":
            continue  # runs the command when imported
        try:
            module = importlib.import_module(info.name)
        except ImportError as error:
            if (error.name or "").split(".")[0] not in OPTIONAL:
                raise
            skipped.append(info.name)
            continue
        found += [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                  if issubclass(cls, BaseException) and not issubclass(cls, Warning)
                  and cls.__module__ == module.__name__]
    return found


def test_every_error_class_rstar2_defines_has_the_one_root():
    classes = rstar2_exception_classes()
    assert len(classes) >= 25  # the walk found them: DataError, ConfigError, NothingLearned, ...
    assert {cls.__name__ for cls in classes} >= {"ConfigError", "DataError", "NothingLearned",
                                                 "ModelNotFound", "RewardError", "FleetDown"}
    assert [cls.__qualname__ for cls in classes if not issubclass(cls, Rstar2Error)] == []


def test_errors_keep_their_builtin_kind():
    assert issubclass(ConfigError, ValueError) and issubclass(NothingLearned, RuntimeError)


def command_app(error: BaseException) -> App:
    app = App()

    @app.command()
    def run(path: Path = typer.Argument(...)) -> None:
        raise error

    return app


@pytest.mark.parametrize(("error", "code"), [(ConfigError("recipe.yaml: rl.lr: not a number"), 2),
                                            (NothingLearned("no update for 3 steps", 3, Path("c")), 1)])
def test_a_command_reports_any_rstar2_error_as_one_line_with_its_exit_status(error, code):
    result = CliRunner().invoke(command_app(error), ["x"])
    assert result.exit_code == code
    assert result.output.strip() == f"error: {error}"


def test_other_exceptions_are_not_swallowed():
    result = CliRunner().invoke(command_app(KeyError("bug")), ["x"])
    assert isinstance(result.exception, KeyError)


def test_a_group_callback_reports_its_error_the_same_way():
    """``rstar2 eval`` is a group whose callback does the work."""
    app = App()

    @app.callback(invoke_without_command=True)
    def evaluate() -> None:
        raise ConfigError("--bench: no such benchmark")

    @app.command()
    def compare() -> None:
        pass

    result = CliRunner().invoke(app, [])
    assert (result.exit_code, result.output.strip()) == (2, "error: --bench: no such benchmark")
