"""`rstar2 grade`: grade a JSONL file of model outputs against gold answers."""

from pathlib import Path

import typer
from rich.progress import Progress

from rstar2.cli.app import app, fail
from rstar2.cli.options import ANSWER_TAG_HELP
from rstar2.data.jsonl import LineError
from rstar2.reward.grading import DEFAULT_DEADLINE_S, WALL_CLOCK_ALLOWANCE
from rstar2.reward.rows import RowError, RowsReport, grade_rows


def default_out_path(source: Path) -> Path:
    """`outputs.jsonl` -> `outputs.graded.jsonl`, next to the input."""
    return source.with_name(f"{source.stem}.graded.jsonl")


@app.command()
def grade(
    source: Path = typer.Argument(..., metavar="SOURCE", help="JSONL file, one model output per line."),
    response_field: str = typer.Option("response", "--response-field", metavar="FIELD",
                                       help="Field holding the model's text."),
    gold_field: str = typer.Option("answer", "--gold-field", metavar="FIELD", help="Field holding the gold answer."),
    out: Path = typer.Option(None, "--out", "-o", metavar="FILE",
                             help="Where to write the graded rows. Default: SOURCE.graded.jsonl."),
    answer_tag: bool = typer.Option(True, "--answer-tag/--no-answer-tag", help=ANSWER_TAG_HELP),
    any_boxed: bool = typer.Option(False, "--any-boxed", hidden=True, help="Old name of --no-answer-tag."),
    require_answer_tag: bool = typer.Option(False, "--require-answer-tag", hidden=True,
                                            help="Old name of --answer-tag."),
    deadline: float = typer.Option(DEFAULT_DEADLINE_S, "--deadline", min=0.01, metavar="SECONDS",
                                   help="CPU seconds one symbolic check may use; it is also stopped "
                                   f"after {WALL_CLOCK_ALLOWANCE:g} times that on the clock."),
    workers: int = typer.Option(None, "--workers", min=1, metavar="N", help="Worker processes. Default: all cores."),
) -> None:
    """Grade model outputs: extract each final answer and check it against the gold one.

    Every row is written back whole, with `pred` (the extracted answer), `correct` and
    `timed_out` added; a value a row already had under one of those names is kept as
    `<name>_original`. A row missing a field is written back with `grade_error` and reported
    by line number; the others are graded all the same (exit code 1 if any row was not
    graded). Prints the accuracy and how many checks hit the deadline.
    """
    from rstar2.data import read_jsonl, write_jsonl

    if any_boxed or require_answer_tag:  # the old spellings still work, with a warning
        old, new = ("--any-boxed", "--no-answer-tag") if any_boxed else ("--require-answer-tag", "--answer-tag")
        typer.echo(f"warning: {old} is now called {new}; the old name will be removed", err=True)
        answer_tag = not any_boxed
    bad_lines: list[LineError] = []  # reported and written back as such; the rest are graded
    numbered_rows = list(read_jsonl(source, bad_lines=bad_lines))
    if bad_lines and not numbered_rows:
        fail(f"{bad_lines[0]}; no line of {source} is a JSON object (is it JSON Lines?)")
    with Progress(transient=True) as progress:
        bar = progress.add_task("grading", total=len(numbered_rows))
        report = grade_rows(
            numbered_rows,
            response_field=response_field,
            gold_field=gold_field,
            require_answer_tag=answer_tag,
            deadline_s=deadline,
            workers=workers,
            on_grade=lambda: progress.advance(bar),
        )
    add_bad_lines(report, [number for number, _ in numbered_rows], bad_lines)
    out = out or default_out_path(source)
    write_jsonl(out, report.rows)
    _print_summary(report, out, answer_tag)
    if report.errors:
        raise typer.Exit(1)


def add_bad_lines(report: RowsReport, row_lines: list[int], bad_lines: list[LineError]) -> None:
    """Put each line that is not a JSON object into ``report``: an error naming its line, and in
    the output a row ``{"grade_error": ...}`` at its place, so the output keeps the input's order."""
    if not bad_lines:
        return
    placed = [(line, row) for line, row in zip(row_lines, report.rows)]
    for error in bad_lines:  # the file is named once, by the command: each line by its reason
        report.errors.append(RowError(error.line, error.reason))
        placed.append((error.line, {"grade_error": error.reason}))
    report.errors.sort(key=lambda error: error.line)
    report.rows = [row for _, row in sorted(placed, key=lambda item: item[0])]


def _print_summary(report: RowsReport, out: Path, answer_tag: bool) -> None:
    typer.echo(
        f"accuracy {report.accuracy:.4f} ({report.correct}/{report.graded} graded rows); "
        f"{report.timed_out} hit the deadline; {report.no_answer} gave no answer -> {out}"
    )
    if answer_tag and report.graded and report.no_answer == report.graded:
        typer.echo("hint: no row had \\boxed{} inside <answer>...</answer>; "
                   "for models that use no tags, add --no-answer-tag")
    for error in report.errors[:20]:
        typer.echo(f"error: {error}", err=True)
    if len(report.errors) > 20:
        typer.echo(f"error: ... and {len(report.errors) - 20} more rows not graded", err=True)
