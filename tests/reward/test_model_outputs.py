"""Verdicts on real-looking model outputs, graded end to end (extraction, then equivalence)
with the default deadline: the false positives and negatives found by probing the reward
beyond its labelled data, each kept here so that it stays fixed."""

import pytest

from rstar2.reward import Grader
from rstar2.reward.grading import DEFAULT_DEADLINE_S

ROOTS = (
    "<reason>Factoring, $(2x - 1)(4x^2 + 2x - 3) = 0$, and the quadratic formula gives the other "
    "two roots.</reason><answer>The solutions are $\\boxed{x = \\frac{1}{2}, x = \\frac{-1 \\pm "
    "\\sqrt{13}}{4}}$.</answer>"
)
BASE_FIVE = (
    "<reason>Long division in base 5: 4 goes into 4 once...</reason><answer>The quotient is "
    "$\\boxed{204_5}$.</answer>"
)
THREE_BOXES = (
    "<reason>Checking n = 1, 2, 3, 4 by hand and with code, only the first three work."
    "</reason><answer>The values are $\\boxed{1}$, $\\boxed{2}$, and $\\boxed{3}$.</answer>"
)
CORRECTED = "<reason>Trying both.</reason><answer>It is $\\boxed{2}$, no: $\\boxed{3}$.</answer>"
DEGREES = "<reason>Using the sum formula.</reason><answer>$\\boxed{\\tan 75^\\circ}$</answer>"
SMALL_PROBABILITY = "<reason>Computed exactly.</reason><answer>$\\boxed{0.0000673}$</answer>"
TWO_FRACTIONS = "<reason>Both work.</reason><answer>$\\boxed{\\frac{1}{2}\\, \\text{and}\\, \\frac{1}{3}}$</answer>"
EITHER = "<reason>Two cases.</reason><answer>$\\boxed{x = \\frac{1}{2} \\lor x = 2}$</answer>"
RECURRENCE = (
    "<reason>Split at the first return.</reason><answer>$\\boxed{F_n = \\sum_{k=0}^{n-1} "
    "F_{n-k-1} F_k}$</answer>"
)

CASES = {
    # a list whose second item holds \pm inside a fraction was read as its first item
    "roots, all three": (ROOTS, "\\frac{1}{2}, \\frac{-1+\\sqrt{13}}{4}, \\frac{-1-\\sqrt{13}}{4}", True),
    "roots, written with pm in the gold": (ROOTS, "\\frac12, \\frac{-1 \\pm \\sqrt{13}}{4}", True),
    "roots against their first alone": (ROOTS, "\\frac12", False),
    "roots against another second root": (ROOTS, "\\frac{1}{2}, \\frac{-1 \\pm \\sqrt{17}}{4}", False),
    # a base numeral against a gold in delimiters was judged unequal
    "base numeral, gold in dollars": (BASE_FIVE, "$204_5$", True),
    "base numeral, gold boxed": (BASE_FIVE, "\\boxed{204_5}", True),
    "base numeral, gold with braces": (BASE_FIVE, "$204_{5}$", True),
    "base numeral, another base": (BASE_FIVE, "$204_6$", False),
    # several boxes for one multi-part answer were read as the last box
    "three boxes against the set": (THREE_BOXES, "\\{1,2,3\\}", True),
    "three boxes against another set": (THREE_BOXES, "\\{1,2,4\\}", False),
    "three boxes against their last": (THREE_BOXES, "3", False),
    "a corrected box is still the last one": (CORRECTED, "3", True),
    # a degree sign inside a trigonometric function was dropped, leaving radians
    "tan of degrees": (DEGREES, "2 + \\sqrt{3}", True),
    # a gold written to seven decimal places was compared at six
    "seven decimal places": (SMALL_PROBABILITY, "0.0000672", False),
    # "and" between two answers read as a product; "\lor" read as its last equation
    "two fractions against their product": (TWO_FRACTIONS, "\\frac16", False),
    "two fractions against both": (TWO_FRACTIONS, "\\frac{1}{3}, \\frac{1}{2}", True),
    "either root against the second": (EITHER, "2", False),
    "either root against both": (EITHER, "\\frac12, 2", True),
    # two sums over k: the slowest check of the labelled data, well inside the CPU limit
    "a recurrence": (RECURRENCE, "F_n = \\sum_{k=0}^{n-1} F_k F_{n-k-1}", True),
}


@pytest.fixture(scope="module")
def default_grader():
    """The deadline a trainer grades with, not the tests' generous one."""
    with Grader(workers=2, deadline_s=DEFAULT_DEADLINE_S) as grader:
        yield grader


@pytest.mark.parametrize("name", CASES)
def test_model_output(default_grader, name):
    response, gold, correct = CASES[name]
    (grade,) = default_grader.grade_many([(response, gold)])
    assert grade.correct is correct, grade
    assert not grade.timed_out and grade.error is None
