"""The README cannot drift from the code: every `rstar2 ...` command in its fenced blocks parses
with the real CLI (options, choices, types, files that must exist), and every page it links
exists; the same for the pages under docs/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from rstar2.cli import app
from tests.docs.doc_commands import PAGES, REPO, page_commands, rstar2_args, words

LINK = re.compile(r"\]\(([^)\s]+)\)")
UsageError = typer.BadParameter.__base__  # typer's own click: what a command line that does not parse raises
REFUSED = (UsageError, typer.Exit)  # typer.Exit: an option's own one-line refusal (rstar2.cli.app.fail)


def fenced_commands(page: Path) -> list[str]:
    """What follows ``rstar2`` in each command of a page's fenced blocks (``doc_commands``:
    continuation lines joined, without the trailing comment, after ``flock``/``env`` prefixes,
    inside ``bash -c '...'``), leaving out those run in another commit's checkout."""
    return [args for command in page_commands(page) if command.fenced and not command.elsewhere
            and (args := rstar2_args(command.text)) is not None]


def parse_only(argv: list[str]) -> typer.Context:
    """Parse ``argv`` down to the leaf command the way `rstar2` would, without running it."""
    command = typer.main.get_command(app)
    context = command.make_context("rstar2", list(argv))
    while hasattr(command, "resolve_command"):  # a group: descend to the sub-command
        rest = [*context._protected_args, *context.args]
        if not rest:
            break
        name, command, rest = command.resolve_command(context, rest)
        context = command.make_context(name, rest, parent=context)
    return context


CASES = [(page.relative_to(REPO), command) for page in PAGES for command in fenced_commands(page)]


def test_the_readme_shows_commands():
    assert UsageError.__name__ == "UsageError"
    assert sum(page == Path("README.md") for page, _ in CASES) >= 5


@pytest.mark.parametrize(("page", "command"), CASES, ids=[f"{p}: {c[:40]}" for p, c in CASES])
def test_documented_command_parses(page, command, tmp_path, monkeypatch):
    """Parsed in a copy of the repository's layout where the run outputs a command reads
    (``runs/...``, written by an earlier command) exist."""
    argv = words(command)
    for name in ("recipes", "rstar2", "benchmarks"):
        (tmp_path / name).symlink_to(REPO / name)
    for arg in argv:
        if arg.startswith("runs/") and Path(arg).suffix:
            (tmp_path / arg).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / arg).touch()
    monkeypatch.chdir(tmp_path)
    try:
        parse_only(argv)
    except REFUSED as error:
        pytest.fail(f"{page}: `rstar2 {command}` does not parse: {error}")


def test_a_wrong_command_would_be_caught():
    for wrong in (["eval", "--bench", "gsm8k", "--engine", "tpu"], ["chat", "--no-such-option"],
                  ["train", "recipes/no-such.yaml"], ["sandbox", "serve", "--workers", "many"]):
        with pytest.raises(REFUSED):
            parse_only(wrong)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_linked_page_exists(page):
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.relative_to(REPO)} links {target}, which does not exist"


def test_the_readme_is_a_front_page():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200
