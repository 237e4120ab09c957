"""Problems with gold answers, read from JSONL files of ``{"problem": ..., "answer": ...}`` rows.

Contract of ``read_problems(path)``:

* every row needs a non-empty string ``problem`` and an ``answer`` (a non-empty string, or a
  number, which is kept as written: ``27`` -> ``"27"``);
* ``id`` is optional; rows without one are called ``<file stem>-<line number>``, which stays
  stable when other rows are deleted, so an eval run and a later data filter agree on names;
* ids must be unique within the file;
* every bad row is reported at once, each with its line number, in one ``DataError``
  (a file with thousands of rows should not be fixed one error per run).

The source row is kept whole in ``Problem.row`` so that filters can write it back unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rstar2.data.jsonl import DataError, read_jsonl

MAX_REPORTED_ERRORS = 20


@dataclass(frozen=True)
class Problem:
    """One question with its gold answer."""

    id: str
    problem: str
    answer: str
    line: int = 0
    """Line of the source file (1-based; 0 when the problem was not read from a file)."""
    row: dict = field(default_factory=dict, compare=False, repr=False)
    """The source row as read, with every field it had."""


def read_problems(path: str | Path) -> list[Problem]:
    """The problems of a JSONL file, in file order; raises ``DataError`` listing every bad row."""
    path = Path(path)
    problems: list[Problem] = []
    errors: list[str] = []
    first_line_of: dict[str, int] = {}
    for line, row in read_jsonl(path):
        try:
            problem = problem_from_row(row, line, default_id=f"{path.stem}-{line}")
        except DataError as error:
            errors.append(f"line {line}: {error}")
            continue
        if problem.id in first_line_of:
            errors.append(f"line {line}: id {problem.id!r} already used on line {first_line_of[problem.id]}")
            continue
        first_line_of[problem.id] = line
        problems.append(problem)
    if errors:
        raise DataError(bad_rows_message(path, errors))
    if not problems:
        raise DataError(f"{path}: no problems (the file is empty)")
    return problems


def problem_from_row(row: dict, line: int, default_id: str) -> Problem:
    """A ``Problem`` from one row, or ``DataError`` saying what is wrong with it."""
    text = row.get("problem")
    if text is None:
        hint = " (it has 'question'; rename it to 'problem')" if "question" in row else ""
        raise DataError(f"missing 'problem'{hint}")
    if not isinstance(text, str):
        raise DataError(f"'problem' must be a string, got {type(text).__name__}")
    if not text.strip():
        raise DataError("empty 'problem'")
    return Problem(id=row_id(row, default_id), problem=text, answer=gold_answer(row), line=line, row=row)


def gold_answer(row: dict) -> str:
    """The row's answer as a non-empty string."""
    if "answer" not in row or row["answer"] is None:
        raise DataError("missing 'answer'")
    answer = row["answer"]
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise DataError(f"'answer' must be a string or a number, got {type(answer).__name__}")
    text = str(answer).strip()
    if not text:
        raise DataError("empty 'answer'")
    return text


def row_id(row: dict, default_id: str) -> str:
    """The row's ``id`` as a string, or ``default_id`` when it has none."""
    value = row.get("id")
    if value is None:
        return default_id
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise DataError(f"'id' must be a non-empty string or an integer, got {value!r}")
    return str(value)


def bad_rows_message(path: Path, errors: list[str]) -> str:
    """One message listing the first bad rows of ``path`` and how many there are in all."""
    shown = "\n".join(f"  {error}" for error in errors[:MAX_REPORTED_ERRORS])
    more = len(errors) - MAX_REPORTED_ERRORS
    tail = f"\n  ... and {more} more" if more > 0 else ""
    noun = "row" if len(errors) == 1 else "rows"
    return f"{path}: {len(errors)} bad {noun}\n{shown}{tail}"
