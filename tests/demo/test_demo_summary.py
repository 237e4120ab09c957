"""The demo's held-out results per kind of problem: where RL gained and where it unlearned what
the SFT model could do, which a pooled gain can hide."""

from rstar2.data.problems import Problem
from rstar2.demo.pipeline import accuracy_by_kind, problem_kinds


def problem(id: str, **row) -> Problem:
    return Problem(id=id, problem="?", answer="1", row=row)


def test_kinds_are_family_and_level_when_every_row_has_them():
    problems = [problem("a", family="counting", level="basic"), problem("b", family="counting", level="hard")]
    assert problem_kinds(problems) == {"a": "counting (basic)", "b": "counting (hard)"}
    assert problem_kinds(problems + [problem("c", family="word")]) == {}  # one row without a level
    assert problem_kinds([problem("gsm8k-1")]) == {}


def test_accuracy_by_kind_counts_the_problems_both_models_answered():
    kinds = {"a": "x (basic)", "b": "x (basic)", "c": "y (hard)", "d": "y (hard)", "e": "z (hard)"}
    sft = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0}
    final = {"a": 0.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 1.0}  # e: the SFT model's answer is missing
    assert accuracy_by_kind(kinds, sft, final) == {
        "x (basic)": {"problems": 2, "sft": 1.0, "final": 0.5},  # a kind RL unlearned
        "y (hard)": {"problems": 2, "sft": 0.5, "final": 1.0},
    }
    assert accuracy_by_kind(kinds, {}, final) == {}
