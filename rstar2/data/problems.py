"""Problems with gold answers, read from any data source (``rstar2.data.sources``: JSONL,
Parquet, a ``datasets`` folder, a hub data set) through a field mapping.

    problems = read_problems("train.parquet", FieldMap(problem="question", answer="final_answer"))

Contract of ``read_problems(spec, fields, split=None, subset=None)``:

* every row needs a non-empty string problem and an answer (a non-empty string, or a number,
  which is kept as written: ``27`` -> ``"27"``), under the names ``fields`` gives them
  (``problem``, ``answer`` and ``id`` by default);
* the id is optional; rows without one are called ``<source name>-<line or row number>``,
  which stays stable when other rows are deleted, so an eval run and a later data filter agree
  on names;
* ids must be unique within the source;
* every bad row is reported at once, each with its line (JSONL) or row number and what is
  wrong with it, first bad row first, in one ``DataError`` (a file with thousands of rows
  should not be fixed one error per run); nothing is read lazily, so a caller that writes only
  after this returns writes nothing for bad data.

The source row is kept whole in ``Problem.row`` so that filters can write it back unchanged
(``Problem.source_row`` puts the id back under the mapped name).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rstar2.data.jsonl import DataError
from rstar2.data.sources import DataSource, open_source
from rstar2.data.tables import ROW_READERS
from rstar2.section import Section

MAX_REPORTED_ERRORS = 20


class FieldMap(Section):
    """Which field of a source row holds what a problem needs."""

    problem: str = "problem"
    """The field with the problem text (e.g. 'question')."""
    answer: str = "answer"
    """The field with the gold answer, a string or a number (e.g. 'final_answer')."""
    id: str = "id"
    """The field with the row's unique id; rows without it are named after the source and
    their line or row number."""

    def described(self, role: str) -> str:
        """``'question'`` or, mapped, ``'question' (the problem field)``, for messages."""
        name = getattr(self, role)
        return repr(name) if name == role else f"{name!r} (the {role} field)"


@dataclass(frozen=True)
class Problem:
    """One question with its gold answer."""

    id: str
    problem: str
    answer: str
    line: int = 0
    """Line (JSONL) or row of the source (1-based; 0 when the problem was not read from one)."""
    row: dict = field(default_factory=dict, compare=False, repr=False)
    """The source row as read, with every field it had."""

    def source_row(self, fields: FieldMap | None = None) -> dict:
        """The source row with the problem's id under the id field, as filters write it back."""
        return {**self.row, (fields or FieldMap()).id: self.id}


QUESTION_NAMES = ("question", "query", "prompt", "input")
"""Names a problem field often has in other data sets, suggested when ``problem`` is missing."""


def read_problems(spec: str | Path, fields: FieldMap | None = None, *, split: str | None = None,
                  subset: str | None = None) -> list[Problem]:
    """The problems of a data source, in order; raises ``DataError`` listing every bad row."""
    return source_problems(open_source(spec, split=split, subset=subset), fields)


def read_ids(spec: str | Path, fields: FieldMap | None = None) -> set[str]:
    """The problem ids a keep-list names: a text file (``.txt`` or any suffix that is not a
    data format) holds one id per line; a data set (``rstar2 data difficulty-filter``'s output,
    or any source ``read_problems`` reads) names the ids of its problems, read through
    ``fields``."""
    path = Path(spec).expanduser()
    if path.suffix.lower() not in ROW_READERS:
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        return set(path.read_text(encoding="utf-8").split())
    return {problem.id for problem in read_problems(path, fields)}


def source_problems(source: DataSource, fields: FieldMap | None = None) -> list[Problem]:
    """``read_problems`` of an opened source."""
    fields = fields or FieldMap()
    problems: list[Problem] = []
    errors: list[str] = []
    first_seen: dict[str, str] = {}
    for where, key, row in source.rows():
        try:
            problem = problem_from_row(row, key, f"{source.name}-{key}", fields)
        except DataError as error:
            errors.append(f"{where}: {error}")
            continue
        if problem.id in first_seen:
            errors.append(f"{where}: id {problem.id!r} already used on {first_seen[problem.id]}")
            continue
        first_seen[problem.id] = where
        problems.append(problem)
    if errors:
        raise DataError(bad_rows_message(source.origin, errors))
    if not problems:
        raise DataError(f"{source.origin}: no problems (it has no rows)")
    return problems


def problem_from_row(row: dict, line: int, default_id: str, fields: FieldMap | None = None) -> Problem:
    """A ``Problem`` from one row, or ``DataError`` saying what is wrong with it."""
    fields = fields or FieldMap()
    text = row.get(fields.problem)
    if text is None:
        raise DataError(f"missing {fields.described('problem')}{field_hint(row, fields)}")
    if not isinstance(text, str):
        raise DataError(f"{fields.described('problem')} must be a string, got {type(text).__name__}")
    if not text.strip():
        raise DataError(f"empty {fields.described('problem')}")
    return Problem(id=row_id(row, default_id, fields), problem=text, answer=gold_answer(row, fields),
                   line=line, row=row)


def field_hint(row: dict, fields: FieldMap) -> str:
    """Where the problem text probably is, when the row lacks the problem field."""
    likely = [name for name in QUESTION_NAMES if name in row]
    if likely:
        return (f" (the row has {likely[0]!r}: map it with data.fields.problem: {likely[0]} in a "
                f"recipe, --field problem={likely[0]} on the command line)")
    return field_list(row)


def gold_answer(row: dict, fields: FieldMap | None = None) -> str:
    """The row's answer as a non-empty string."""
    fields = fields or FieldMap()
    answer = row.get(fields.answer)
    if answer is None:
        listed = "" if fields.answer in row else field_list(row)  # present but null: no list
        raise DataError(f"missing {fields.described('answer')}{listed}")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise DataError(f"{fields.described('answer')} must be a string or a number, got {type(answer).__name__}")
    text = str(answer).strip()
    if not text:
        raise DataError(f"empty {fields.described('answer')}")
    return text


def field_list(row: dict) -> str:
    """`` (fields present: 'a', 'b')``: what a row has, when it lacks a field."""
    return f" (fields present: {', '.join(repr(name) for name in list(row)[:8]) or 'none'})"


def row_id(row: dict, default_id: str, fields: FieldMap | None = None) -> str:
    """The row's id as a string, or ``default_id`` when it has none."""
    fields = fields or FieldMap()
    value = row.get(fields.id)
    if value is None:
        return default_id
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise DataError(f"{fields.described('id')} must be a non-empty string or an integer, got {value!r}")
    return str(value)


def bad_rows_message(origin: str | Path, errors: list[str]) -> str:
    """One message listing the first bad rows of ``origin`` and how many there are in all."""
    shown = "\n".join(f"  {error}" for error in errors[:MAX_REPORTED_ERRORS])
    more = len(errors) - MAX_REPORTED_ERRORS
    tail = f"\n  ... and {more} more" if more > 0 else ""
    noun = "row" if len(errors) == 1 else "rows"
    return f"{origin}: {len(errors)} bad {noun}\n{shown}{tail}"
