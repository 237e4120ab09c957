"""`rstar2 ... --help` reads well in an 80-column terminal and speaks one vocabulary: nothing
wider than the terminal, each option's help in a wide column (rich's option table squeezed it
into a narrow one), values named in words rather than Python types, the same option names for
the same things in every command, and bad values answered in words."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

import rstar2
from rstar2.cli import app

runner = CliRunner()
OPTION_LINE = re.compile(r"^  (-\S.*?)  +(\S.*)$")


def commands(command=None, path=()) -> dict[tuple[str, ...], object]:
    """Every command of the `rstar2` tree (groups too) by its argument list, as click objects."""
    command = command or typer.main.get_command(app)
    found = {path: command} if path else {}
    for name, sub in getattr(command, "commands", {}).items():
        found |= commands(sub, (*path, name))
    return found


COMMANDS = list(commands())


def help_of(command: tuple[str, ...]) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_is_checked():
    assert {("train",), ("grade",), ("serve-model",), ("data", "difficulty-filter"), ("eval", "compare")} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_fits_80_columns_with_a_wide_help_column(command):
    lines = help_of(command).splitlines()
    assert max(map(len, lines)) <= 80, max(lines, key=len)
    help_columns = [line.index(match.group(2)) for line in lines if (match := OPTION_LINE.match(line))]
    assert help_columns and max(help_columns) <= 34, "\n".join(lines)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_values_are_named_in_words_not_python_types(command):
    """`--set KEY=VALUE`, not `--set <list[str]>`; `train [OPTIONS] RECIPE`, not `{recipe}`."""
    usage = help_of(command).splitlines()[0]
    assert "{" not in usage and "<" not in usage, usage
    lines = help_of(command).splitlines()
    listed = [line for line in lines[lines.index("Options:"):] if OPTION_LINE.match(line)]
    if "Arguments:" in lines:
        start = lines.index("Arguments:")
        listed += [line for line in lines[start:lines.index("Options:")] if re.match(r"^  [A-Z]", line)]
    names = [re.split(r"\s{2,}", line.strip())[0] for line in listed]
    typed = [name for name in names if re.search(r"<[^>]*>|\{", name)]
    assert names and typed == [], typed


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"rstar2 {rstar2.__version__}"


@pytest.mark.parametrize("command", [("grade",), ("eval",), ("chat",)], ids=" ".join)
def test_the_answer_tag_rule_has_one_name(command):
    text = help_of(command)
    assert "--answer-tag / --no-answer-tag" in text
    assert "--any-boxed" not in text and "--require-answer-tag" not in text


@pytest.mark.parametrize("command", [("chat",), ("eval",), ("serve-model",)], ids=" ".join)
def test_commands_that_run_a_model_share_the_model_options(command):
    text = help_of(command)
    for option in ("--model", "--tokenizer DIR", "--dtype", "--device DEVICE", "--threads N"):
        assert option in text, option
    # serve-model serves the embedded engine only: it offers no choice it would refuse
    assert ("--engine [hf|openai|vllm]" in text) == (command != ("serve-model",))


@pytest.mark.parametrize("command", [("train",), ("sft",)], ids=" ".join)
def test_the_recipe_override_help_fits_every_command_that_takes_one(command):
    text = help_of(command)
    assert "--set KEY=VALUE" in text and "section.field=value" in text
    assert "rl.optimizer" not in text and "train.epochs" not in text  # no other command's fields


def test_serve_model_refuses_other_engines_in_words_before_loading_anything():
    result = runner.invoke(app, ["serve-model", "--engine", "vllm"])
    assert result.exit_code == 2
    assert "serve-model serves a model in this process (--engine hf), not 'vllm'" in result.output
