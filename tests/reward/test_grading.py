"""The public reward API: score, is_equivalent, grade_many, and the deadline on hostile answers."""

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rstar2.reward import Grade, Grader, grade_many, is_equivalent, score
from rstar2.reward.grading import WALL_CLOCK_ALLOWANCE

HOSTILE_ANSWERS = {
    "power tower": "10^{10^{10}}",
    "nested fractions": "\\frac{1}{" * 300 + "2" + "}" * 300,
    "100k-term sum": "+".join(["x"] * 100_000),
    "million digits": "9" * 1_000_000 + ".5",
    "nested roots": "\\sqrt{" * 500 + "2" + "}" * 500,
    "factorial tower": "((10!)!)!",
}


def test_score_is_the_binary_reward_of_the_answer_block():
    assert score("<reason>2+2</reason><answer>\\boxed{4}</answer>", "4") == 1.0
    assert score("<reason>2+2</reason><answer>\\boxed{5}</answer>", "4") == 0.0
    assert score("<reason>\\boxed{4}</reason>", "4") == 0.0  # no answer block
    assert score("\\boxed{4}", "4", require_answer_tag=False) == 1.0
    assert score("<answer>\\boxed{\\dfrac{1}{2}}</answer>", "0.5") == 1.0


def test_is_equivalent_decides_in_a_worker():
    assert is_equivalent("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}")
    assert not is_equivalent("\\frac{1}{3}", "0.3")
    long = "12345" * 2_000
    assert is_equivalent(long, long + ".0")
    assert not is_equivalent(long, long[:-1] + "6")
    assert not is_equivalent(None, "1")


SHORT_DEADLINE_S = 1.0


@pytest.fixture(scope="module")
def strict_grader():
    """One worker with a short deadline, started before the tests time anything."""
    with Grader(workers=1, deadline_s=SHORT_DEADLINE_S) as grader:
        grader.compare_many([("1", "\\frac{2}{2}")])
        yield grader


@pytest.mark.parametrize("name", HOSTILE_ANSWERS)
def test_a_hostile_answer_costs_at_most_the_deadline_and_scores_zero(strict_grader, name):
    started = time.monotonic()
    (grade,) = strict_grader.compare_many([(HOSTILE_ANSWERS[name], "\\frac{1}{7}")])
    elapsed = time.monotonic() - started
    assert not grade.correct
    assert grade.reward == 0.0
    # A check is killed at its CPU limit, or at WALL_CLOCK_ALLOWANCE times it on the clock when
    # the machine is busy; the kill and the fork of a replacement take milliseconds.
    assert elapsed < SHORT_DEADLINE_S * WALL_CLOCK_ALLOWANCE + 1.0
    assert strict_grader.compare_many([("0.5", "\\frac{1}{2}")])[0].correct  # the pool lives on


def test_hostile_answers_in_a_batch_do_not_hold_up_the_others():
    honest = [(f"\\frac{{{n}}}{{2}}", f"{n / 2}") for n in range(1, 21)]
    hostile = [(answer, "\\frac{1}{7}") for answer in HOSTILE_ANSWERS.values()]
    with Grader(workers=2, deadline_s=SHORT_DEADLINE_S) as grader:
        grades = grader.compare_many(hostile + honest)
    assert all(g.correct for g in grades[len(hostile) :])
    assert not any(g.correct for g in grades[: len(hostile)])
    assert sum(g.timed_out for g in grades) >= 3


def test_grade_many_returns_one_grade_per_pair_in_order():
    pairs = [
        ("<answer>\\boxed{3}</answer>", "3"),
        ("<answer>\\boxed{x = 2}</answer>", "2"),
        ("<answer>no box</answer>", "1"),
        ("<answer>\\boxed{\\{1,2\\}}</answer>", "\\{2,1\\}"),
    ]
    grades = grade_many(pairs, workers=2)
    assert grades == [
        Grade(pred="3", correct=True),
        Grade(pred="x = 2", correct=True),
        Grade(pred=None, correct=False),
        Grade(pred="\\{1,2\\}", correct=True),
    ]


def test_calls_from_many_threads_get_their_own_answers():
    pairs = [(f"\\frac{{{n}}}{{4}}", f"{n / 4}") for n in range(24)]
    pairs += [(f"\\frac{{{n}}}{{4}}", f"{n / 4 + 1}") for n in range(24)]
    with ThreadPoolExecutor(max_workers=8) as executor:
        verdicts = list(executor.map(lambda pair: is_equivalent(*pair), pairs))
    assert verdicts == [True] * 24 + [False] * 24


def test_rejects_a_nonpositive_deadline():
    with pytest.raises(ValueError, match="deadline_s"):
        Grader(deadline_s=0)


def test_the_package_imports_without_torch_or_sympy():
    code = (
        "import sys, rstar2.reward, rstar2.reward.rows\n"
        "heavy = [m for m in ('torch', 'sympy', 'math_verify') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
