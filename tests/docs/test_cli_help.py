"""`rstar2 ... --help` reads well in an 80-column terminal: nothing wider than the terminal, and
each option's help in a wide column (rich's option table squeezed it into a narrow one)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from rstar2.cli import app

COMMANDS = [["demo"], ["train"], ["eval"], ["eval", "compare"], ["grade"], ["chat"],
            ["serve-model"], ["sandbox", "serve"], ["data", "decontaminate"], ["view"]]
OPTION_LINE = re.compile(r"^  (-\S.*?)  +(\S.*)$")


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_fits_80_columns_with_a_wide_help_column(command):
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80, max(lines, key=len)
    help_columns = [line.index(match.group(2)) for line in lines if (match := OPTION_LINE.match(line))]
    assert help_columns and max(help_columns) <= 34, result.output
