"""Answer extraction: the last box inside the <answer> block, on crafted and real outputs."""

import pytest

from rstar2.reward import extract_answer
from tests.reward.data import read_rows


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<reason>try \\boxed{1}</reason><answer>so \\boxed{2}, no: \\boxed{3}</answer>", "3"),
        ("<answer>\\boxed{\\frac{1}{\\sqrt{2}}}</answer>", "\\frac{1}{\\sqrt{2}}"),
        ("<answer>\\boxed{\\{1, 2\\}}</answer>", "\\{1, 2\\}"),
        ("<answer>\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}</answer>", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
        ("<answer>The answer is $\\boxed 5$.</answer>", "5"),
        ("<answer>\\boxed  42</answer>", "42"),
        ("<answer>\\fbox{12}</answer>", "12"),
        ("<answer>\\boxed{ 7 }</answer>", "7"),
        ("<answer>\\boxed{1}</answer> more reasoning <answer>\\boxed{2}</answer>", "2"),
        ("<answer>\\boxed{1} \\boxed{2}</answer>", "2"),  # no separator: not a list
        ("<answer>$x = \\boxed{3}$, $y = \\boxed{4}$</answer>", "4"),  # text between the boxes
    ],
)
def test_reads_the_last_box_inside_the_answer_block(response, expected):
    assert extract_answer(response) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<answer>\\boxed{1}, \\boxed{2}, \\boxed{3}</answer>", "1, 2, 3"),
        ("<answer>The values are $\\boxed{1}$, $\\boxed{2}$, and $\\boxed{3}$.</answer>", "1, 2, 3"),
        ("<answer>\\(\\boxed{-2}\\) and \\(\\boxed{5}\\)</answer>", "-2, 5"),
        ("<answer>$\\boxed{a}\\text{ and }\\boxed{b}$</answer>", "a, b"),
        ("<answer>\\boxed{3};\\quad\\boxed{\\frac{1}{2}}</answer>", "3, \\frac{1}{2}"),
        ("<answer>\\boxed{1}, \\boxed{2}, no wait: \\boxed{7}, \\boxed{8}</answer>", "7, 8"),
    ],
)
def test_boxes_listed_at_the_end_are_one_multi_part_answer(response, expected):
    assert extract_answer(response) == expected


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{5}",  # no answer block at all
        "<reason>\\boxed{5}</reason><answer>5</answer>",  # the box is in the reasoning
        "<answer>\\boxed{5}",  # cut off before </answer>
        "<answer>\\boxed{3} or \\boxed{4</answer>",  # the final box is unclosed
        "<answer>\\boxed{}</answer>",
        "<answer>\\boxedness{5}</answer>",  # not a box command
        "",
    ],
)
def test_no_answer_without_a_closed_box_in_the_answer_block(response):
    assert extract_answer(response) is None


def test_without_the_tag_requirement_the_last_box_anywhere_counts():
    assert extract_answer("so \\boxed{1} then \\boxed{2}.", require_answer_tag=False) == "2"
    assert extract_answer("<reason>\\boxed{7}</reason><answer>7</answer>", require_answer_tag=False) == "7"
    assert extract_answer("<answer>\\boxed{8}</answer> \\boxed{9}", require_answer_tag=False) == "8"
    assert extract_answer("no box here", require_answer_tag=False) is None


def test_pathological_responses_are_read_in_one_pass():
    unclosed = "<answer>" + "\\boxed{" * 200_000 + "</answer>"
    assert extract_answer(unclosed) is None
    many = "<answer>" + "\\boxed{1} " * 100_000 + "\\boxed{2}</answer>"
    assert extract_answer(many) == "2"
    listed = "<answer>" + "\\boxed{1}, " * 100_000 + "\\boxed{2}</answer>"
    assert extract_answer(listed) == "2"  # a run of boxes that long is no answer list
    spaced = "<answer>\\boxed{1}" + " ," * 100_000 + " x \\boxed{2}</answer>"
    assert extract_answer(spaced) == "2"
    deep = "<answer>\\boxed{" + "{" * 100_000 + "x" + "}" * 100_001 + "</answer>"
    assert extract_answer(deep) == "{" * 100_000 + "x" + "}" * 100_000


def test_agrees_with_qwen_parser_on_real_outputs(samples, grader):
    rows = read_rows(samples / "math_cot_samples" / "qwen25_math_cot_100x8.jsonl")
    ours = [extract_answer(row["response"], require_answer_tag=False) for row in rows]
    grades = grader.compare_many([(mine, row["pred"]) for mine, row in zip(ours, rows)])
    differing = [(mine, row["pred"]) for mine, row, g in zip(ours, rows, grades) if not g.correct]
    assert differing == []


def test_agrees_with_tora_parser_wherever_the_output_is_boxed(samples, grader):
    rows = read_rows(samples / "tir_traces" / "tora_70b_gsm8k.jsonl")
    boxed = [(extract_answer(row["response"], require_answer_tag=False), row) for row in rows]
    boxed = [(mine, row) for mine, row in boxed if mine is not None]
    grades = grader.compare_many([(mine, row["pred"]) for mine, row in boxed])
    differing = [(mine, row["pred"]) for (mine, row), g in zip(boxed, grades) if not g.correct]
    assert len(boxed) == 295  # of the 300 responses, the rest end without a box
    assert differing == []
