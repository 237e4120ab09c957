"""The integer-answer filter of the RL data (paper §4.2).

Rule verifiers cannot reliably prove two algebraic expressions equal, so RL trains only on
problems whose gold answer is an integer. "Integer" means what the reward itself reads as
one (``rstar2.reward.normalize.canonical_integer``: signs, leading zeros, thousands
separators, ``.0``, a unit or ``%`` are decoration), so the filter and the grader never
disagree. Kept rows get the canonical digits as their answer (under the field the mapping
names, ``answer`` by default) and, where that changed the text, the original in
``<answer field>_raw``; every other field is kept as it was.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rstar2.data.problems import FieldMap, Problem
from rstar2.reward.normalize import canonical_integer


@dataclass(frozen=True)
class IntegerSplit:
    """The outcome of the filter: rows to keep (rewritten) and problems dropped."""

    kept: list[dict]
    dropped: list[Problem]


def split_integer_answers(problems: Iterable[Problem], fields: FieldMap | None = None) -> IntegerSplit:
    """Keep the problems whose answer is an integer; see the module docstring."""
    kept: list[dict] = []
    dropped: list[Problem] = []
    for problem in problems:
        digits = canonical_integer(problem.answer)
        if digits is None:
            dropped.append(problem)
        else:
            kept.append(with_canonical_answer(problem, digits, fields or FieldMap()))
    return IntegerSplit(kept=kept, dropped=dropped)


def with_canonical_answer(problem: Problem, digits: str, fields: FieldMap) -> dict:
    """The problem's source row with its answer set to ``digits`` (original kept if it differs)."""
    row = problem.source_row(fields)
    if digits != problem.answer:
        row.setdefault(f"{fields.answer}_raw", row.get(fields.answer))
    row[fields.answer] = digits
    return row
