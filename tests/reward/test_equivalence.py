"""Answer equivalence: kinds of answers, three checkers' labelled cases, real graded outputs."""

import random
from collections import Counter

import pytest

from rstar2.data.benchmarks import PACKAGED_DATA_DIR
from rstar2.reward.equivalence import equivalent, symbolically_equivalent
from rstar2.reward.extract import extract_answer
from tests.reward.data import read_rows, tora_recorded_grade

EQUAL = [
    ("0.5", "\\frac{1}{2}"),
    ("\\dfrac{3}{4}", "0.75"),
    ("918\\frac{1}{2}", "918.5"),  # mixed number
    ("\\sqrt{8}", "2\\sqrt{2}"),
    ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}"),
    ("2\\pi", "\\pi \\cdot 2"),
    ("\\{3, 1, 2\\}", "\\{1, 2, 3\\}"),
    ("1, -2", "-2, 1"),
    ("[-1, 2)", "[-1,2)"),
    ("(1, \\frac{9}{2})", "(1, 4.5)"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{bmatrix} 1 \\\\ 2 \\end{bmatrix}"),
    ("x = 3", "3"),
    ("3", "x=3"),
    ("y = 2x + 1", "2x+1"),
    ("-34x-45y+20z-100=0", "34x+45y-20z+100=0"),
    ("28\\%", "28"),
    ("28\\%", "0.28"),
    ("33.33\\%", "33.33"),
    ("5\\text{ cm}", "5"),
    ("\\text{(C)}", "C"),
    ("90^\\circ", "90"),
    ("10{,}000", "10000"),
    ("\\$1,000.99", "1000.99"),
    ("12.", "12"),
    ("0.33", "\\frac{1}{3}"),  # a decimal is judged at the precision it is written in
    ("2.6667", "\\frac{8}{3}"),
    ("1 - \\frac{1}{\\mathrm{e}}", "1 - e^{-1}"),
    ("204_{5}", "204_5"),
]

NOT_EQUAL = [
    ("0.3", "\\frac{1}{3}"),  # ...but never below two places
    ("0.13", "0.125"),  # a decimal gold sets its own precision
    ("5.001", "5"),
    ("\\frac{1}{2}", "\\frac{1}{3}"),
    ("\\sqrt{2}", "2"),
    ("1 + \\frac{1}{\\mathrm{e}}", "1 - \\frac{1}{\\mathrm{e}}"),
    ("\\{1, 2\\}", "\\{1, 2, 3\\}"),
    ("[-1, 2]", "[-1, 2)"),
    ("(1, 2)", "(2, 1)"),
    ("x = 3", "x = 4"),
    ("0", "5x - 7y + 11z + 4 = 0"),
    ("5x - 7y + 11z + 4 = 0", "0"),  # an equation in unknowns is not its right side
    ("f(y)", "f(x)"),
    ("40", "40_9"),
    ("25\\%", "24"),
    ("0.25", "25"),
    ("\\text{odd}", "\\text{oddd}"),
    (None, "1"),
]


@pytest.mark.parametrize(("pred", "gold"), EQUAL)
def test_equal_answers(pred, gold):
    assert equivalent(pred, gold)


@pytest.mark.parametrize(("pred", "gold"), NOT_EQUAL)
def test_unequal_answers(pred, gold):
    assert not equivalent(pred, gold)


# Labels we deliberately do not follow: they record a checker's quirk or a setting that the
# same checker flips on an identical pair, not mathematics.
DOCUMENTED_DIFFERENCES = {
    "0031": "math-verify's inline-math pattern refuses a newline inside `$ ... $`; the text answers 9",
    "0032": "math-verify's inline-math pattern refuses a newline inside `\\( ... \\)`; the text answers 9",
    "0187": "same pair as 0186, labelled the other way under allow_set_relation_comp=False; "
    "`x \\in [-2,7]` and `-2 \\le x \\le 7` are the same set, so we always compare them",
    "0259": "math-verify's unit stripping deletes `\\mathrm{e}}`, reading both `1 \\pm 1/e` as 1; "
    "they differ by 2/e",
    "0265": "same pair as 0264, labelled the other way under strict=False; variable names stay "
    "significant, `f(x)` is not `f(y)`",
    "0271": "hendrycks is_equiv compares strings, so a reordered list differs; we read a comma "
    "list as the set of answers, as math-verify's labels do (0191, 0203, 0214)",
    "0278": "as 0271: `0.1, 4, 2` and `4, .1, 2` list the same answers",
}


def _disagreements(rows, grades) -> list[str]:
    return [row["id"] for row, grade in zip(rows, grades) if grade.correct != row["equal"]]


def test_answer_equiv_agreement_in_one_uniform_mode(samples, grader):
    rows = read_rows(samples / "answer_equiv" / "answer_equiv.jsonl")
    grades = grader.compare_many([(row["pred"], row["gold"]) for row in rows])
    disagreements = _disagreements(rows, grades)
    assert set(disagreements) <= set(DOCUMENTED_DIFFERENCES), disagreements
    assert len(rows) - len(disagreements) >= 306
    per_source = Counter(row["source"].split(":")[0] for row in rows)
    assert per_source == {"math-verify": 270, "nemo-skills": 30, "hendrycks-math": 16}


def test_symmetric_cases_hold_in_both_orders(samples, grader):
    rows = [r for r in read_rows(samples / "answer_equiv" / "answer_equiv.jsonl") if r["symmetric"]]
    grades = grader.compare_many([(row["gold"], row["pred"]) for row in rows])
    assert rows and _disagreements(rows, grades) == []


GOLD_FORMS = {
    "bare": "{}",
    "dollars": "${}$",
    "boxed": "\\boxed{{{}}}",
}


@pytest.mark.parametrize("form", GOLD_FORMS)
def test_agrees_with_qwen_grades_whatever_the_gold_form(samples, grader, form):
    rows = read_rows(samples / "math_cot_samples" / "qwen25_math_cot_100x8.jsonl")
    golds = [GOLD_FORMS[form].format(row["answer"]) for row in rows]
    grades = grader.grade_many(
        [(row["response"], gold) for row, gold in zip(rows, golds)], require_answer_tag=False
    )
    differing = [(row["id"], row["answer"], g.pred) for row, g in zip(rows, grades) if g.correct != row["score"]]
    # The one row we grade differently: Qwen's grader marks `10000` wrong against `10{,}000`.
    assert differing == [("qwen-math-cot-072-7", "10{,}000", "10000")]


def test_agrees_with_tora_recorded_grades(samples, grader):
    rows = read_rows(samples / "tir_traces" / "tora_70b_gsm8k.jsonl")
    recorded = [tora_recorded_grade(row) for row in rows]
    assert sum(recorded) == 260  # of these 300; on all 1,319: 1,112, ToRA's published 84.3% for this model
    on_their_answers = grader.compare_many([(row["pred"], row["answer"]) for row in rows])
    assert [g.correct for g in on_their_answers] == recorded
    end_to_end = grader.grade_many([(row["response"], row["answer"]) for row in rows], require_answer_tag=False)
    differing = [(g, rec) for g, rec in zip(end_to_end, recorded) if g.correct != rec]
    # ToRA falls back to the program output when a response has no box; the reward does not.
    assert all(g.pred is None and rec for g, rec in differing)
    assert len(differing) <= 11


def _gold_answers() -> list[str]:
    math500 = read_rows(PACKAGED_DATA_DIR / "math500.jsonl")
    hmmt = read_rows(PACKAGED_DATA_DIR / "hmmt_feb2025.jsonl")
    return [row["answer"] for row in math500 + hmmt]


def test_every_gold_answer_is_symbolically_equal_to_itself():
    golds = _gold_answers()
    assert len(golds) == 530
    assert [gold for gold in golds if not symbolically_equivalent(gold, gold)] == []


def test_every_gold_answer_matches_itself_boxed_in_a_response(grader):
    golds = _gold_answers()
    responses = [f"<reason>...</reason><answer>The answer is $\\boxed{{{gold}}}$.</answer>" for gold in golds]
    grades = grader.grade_many(zip(responses, golds))
    assert [gold for gold, g in zip(golds, grades) if not g.correct] == []


# Distinct spellings of one value among the MATH-500 and HMMT gold answers (found by comparing
# all pairs); shuffled pairs drawn from these may match, no other pair may.
SAME_VALUE_SPELLINGS = [
    {"10,\\!080", "10080"},
    {"120", "120^\\circ"},
    {"15", "15\\mbox{ cm}^2"},
    {"2 \\sqrt{5}", "2\\sqrt{5}"},
    {"30", "30^\\circ"},
    {"36", "36^\\circ", "\\$36"},
    {"90", "90^\\circ"},
    {"\\frac14", "\\frac{1}{4}"},
    {"-2,1", "1,-2", "(-2,1)"},
    {"x=5", "5"},
]


def _same_value(a: str, b: str) -> bool:
    return a == b or any({a, b} <= spellings for spellings in SAME_VALUE_SPELLINGS)


@pytest.mark.parametrize("seed", [0, 1])
def test_shuffled_gold_pairs_are_not_equivalent(grader, seed):
    golds = _gold_answers()
    partners = golds[:]
    random.Random(seed).shuffle(partners)
    pairs = [(p, g) for p, g in zip(partners, golds) if not _same_value(p, g)]
    grades = grader.compare_many(pairs)
    assert len(pairs) > 500
    assert [pair for pair, g in zip(pairs, grades) if g.correct] == []


def test_same_value_spellings_are_equivalent_one_way_or_the_other(grader):
    """Keeps the exemptions above honest. `(-2,1)` as gold is an ordered pair, so `1,-2`
    matches it only as the gold (a set), hence one way or the other."""
    pairs = [(a, b) for spellings in SAME_VALUE_SPELLINGS for a in spellings for b in spellings if a < b]
    forward = grader.compare_many(pairs)
    backward = grader.compare_many([(b, a) for a, b in pairs])
    assert [pair for pair, f, b in zip(pairs, forward, backward) if not (f.correct or b.correct)] == []


def test_the_gold_and_the_extracted_answer_play_their_roles(samples):
    rows = read_rows(samples / "math_cot_samples" / "qwen25_math_cot_100x8.jsonl")[:40]
    for row in rows:
        pred = extract_answer(row["response"], require_answer_tag=False)
        assert equivalent(pred, row["answer"]) == row["score"]
