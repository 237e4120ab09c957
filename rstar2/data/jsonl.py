"""Reading and writing JSON Lines files, with errors that name the file and the line.

Contract:

* ``read_jsonl(path)`` yields ``(line_number, object)`` for every non-blank line (numbers
  start at 1, as an editor shows them); a line that is not a JSON object raises
  ``DataError`` naming ``path:line``.
* With ``partial_tail_ok=True`` a last line that does not end in a newline and does not parse
  is skipped instead: that is what a writer killed mid-line leaves behind, and append-as-you-go
  logs (``rstar2.eval``'s ``samples.jsonl``) must survive it.
* With ``bad_lines`` (a list), a line that is not a JSON object is appended there as a
  ``LineError`` (its ``line`` and ``reason``) and skipped instead: for a tool that reports the bad lines of a
  file and does the rest (``rstar2 grade`` over 10,000 outputs and one broken line).
* ``write_jsonl(path, rows)`` writes a whole file atomically (temporary file, then rename), so
  a reader never sees half of it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from rstar2.errors import Rstar2Error


class DataError(Rstar2Error, ValueError):
    """A data file is missing, malformed, or has rows that break its contract."""


class LineError(DataError):
    """One line that is not a JSON object: ``path:line: reason``, with ``line`` and ``reason``
    kept apart for a caller that names the file once and reports lines under it."""

    def __init__(self, path: Path, line: int, reason: str):
        super().__init__(f"{path}:{line}: {reason}")
        self.line, self.reason = line, reason


def read_jsonl(path: str | Path, *, partial_tail_ok: bool = False,
               bad_lines: list[LineError] | None = None) -> Iterator[tuple[int, dict]]:
    """``(line_number, object)`` for each non-blank line of ``path``; see the module docstring."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                value = value_of_line(path, number, line, partial_tail_ok) if line.strip() else None
            except LineError as error:
                if bad_lines is None:
                    raise
                bad_lines.append(error)
                continue
            if value is not None:
                yield number, value


def value_of_line(path: Path, number: int, line: str, partial_tail_ok: bool) -> dict | None:
    """The object on one line; None for a tolerated partial tail (only the last line can lack
    a newline)."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        if partial_tail_ok and not line.endswith("\n"):
            return None
        raise LineError(path, number, f"not valid JSON ({error.msg})") from error
    if not isinstance(value, dict):
        raise LineError(path, number, f"expected a JSON object, got {type(value).__name__}")
    return value


def dump_line(row: dict) -> str:
    """One JSONL line (newline included); non-ASCII kept readable."""
    return json.dumps(row, ensure_ascii=False) + "\n"


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> int:
    """Write ``rows`` to ``path`` atomically; returns the number of rows written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(dump_line(row))
                count += 1
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count
