"""Grading rows of model outputs (JSON objects, as read from a JSONL file), keeping every field.

Contract of `grade_rows(numbered_rows, response_field, gold_field, ...)`:
- returns a `RowsReport` whose `rows` are the input rows in input order, each a copy with
  `pred` (the extracted answer, or null), `correct` and `timed_out` set; where a row already
  held another value under one of those names, that value moves to `<name>_original`;
- a row that lacks the response or the gold field (or holds null or a non-text value there)
  is not graded: it comes back unchanged but for `grade_error`, and the report lists the
  line number and the field; the other rows are graded all the same;
- gold answers written as JSON numbers (`42`, `27.0`) are read as their text.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rstar2.reward.grading import DEFAULT_DEADLINE_S, Grade, Grader

WRITTEN_FIELDS = ("pred", "correct", "timed_out")


@dataclass(frozen=True)
class RowError:
    """Why one row was not graded."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class RowsReport:
    """The graded rows and the tallies `rstar2 grade` prints."""

    rows: list[dict]
    graded: int = 0
    correct: int = 0
    timed_out: int = 0
    no_answer: int = 0
    """Graded rows in which no answer was found (no box, or none inside `<answer>`)."""
    errors: list[RowError] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        """Correct over graded rows (0.0 when none could be graded)."""
        return self.correct / self.graded if self.graded else 0.0


def grade_rows(
    numbered_rows: Sequence[tuple[int, dict]],
    *,
    response_field: str = "response",
    gold_field: str = "answer",
    require_answer_tag: bool = True,
    deadline_s: float = DEFAULT_DEADLINE_S,
    workers: int | None = None,
    on_grade: Callable[[], None] | None = None,
) -> RowsReport:
    """Grade `(line_number, row)` pairs; see the module docstring. `on_grade()` ticks per row."""
    report = RowsReport(rows=[dict(row) for _, row in numbered_rows])
    gradable: list[int] = []
    pairs: list[tuple[str, str]] = []
    for index, (line, row) in enumerate(numbered_rows):
        problem = _field_problem(row, response_field, (str,)) or _field_problem(
            row, gold_field, (str, int, float)
        )
        if problem is None:
            gradable.append(index)
            pairs.append((row[response_field], _as_text(row[gold_field])))
        else:
            report.errors.append(RowError(line, problem))
            report.rows[index]["grade_error"] = problem
            if on_grade is not None:
                on_grade()
    with Grader(workers=workers, deadline_s=deadline_s) as grader:
        grades = grader.grade_many(
            pairs,
            require_answer_tag=require_answer_tag,
            on_grade=(lambda _index, _grade: on_grade()) if on_grade else None,
        )
    for index, grade in zip(gradable, grades):
        _record(report, report.rows[index], grade)
    return report


def _field_problem(row: dict, name: str, kinds: tuple[type, ...]) -> str | None:
    """What makes field `name` of `row` unusable (absent, null, wrong type), or None."""
    if name not in row:
        present = ", ".join(sorted(row)) or "none"
        return f"missing field {name!r} (fields present: {present})"
    value = row[name]
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "null" if value is None else type(value).__name__
        return f"field {name!r} holds {kind}, expected {' or '.join(k.__name__ for k in kinds)}"
    return None


def _as_text(value: str | int | float) -> str:
    return value if isinstance(value, str) else repr(value)


def _record(report: RowsReport, row: dict, grade: Grade) -> None:
    """Write `grade` into `row` (keeping displaced values) and into the tallies."""
    values = {"pred": grade.pred, "correct": grade.correct, "timed_out": grade.timed_out}
    for name in WRITTEN_FIELDS:
        if name in row and row[name] != values[name]:
            row[f"{name}_original"] = row[name]
        row[name] = values[name]
    report.graded += 1
    report.correct += grade.correct
    report.timed_out += grade.timed_out
    report.no_answer += grade.pred is None
