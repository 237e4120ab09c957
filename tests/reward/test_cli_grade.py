"""`rstar2 grade` on real model outputs and on broken rows."""

import json

from typer.testing import CliRunner

from rstar2.cli import app
from tests.reward.data import read_rows

runner = CliRunner()


def _write(path, rows) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def test_grades_real_outputs_and_keeps_every_field(samples, tmp_path):
    rows = read_rows(samples / "math_cot_samples" / "qwen25_math_cot_100x8.jsonl")[:24]
    source = tmp_path / "outputs.jsonl"
    _write(source, rows)
    result = runner.invoke(app, ["grade", str(source), "--no-answer-tag", "--workers", "2"])
    assert result.exit_code == 0, result.output
    graded = read_rows(tmp_path / "outputs.graded.jsonl")
    assert [row["id"] for row in graded] == [row["id"] for row in rows]
    for before, after in zip(rows, graded):
        assert after["correct"] == before["score"]
        assert {k: after.get(k, after.get(f"{k}_original")) for k in before} == before
    correct = sum(row["score"] for row in rows)
    assert f"accuracy {correct / len(rows):.4f} ({correct}/{len(rows)} graded rows)" in result.output
    assert "0 hit the deadline" in result.output


def test_a_row_missing_a_field_is_reported_by_line_and_kept(tmp_path):
    source = tmp_path / "mixed.jsonl"
    rows = [
        {"id": "a", "response": "<answer>\\boxed{3}</answer>", "answer": 3},
        {"id": "b", "text": "<answer>\\boxed{4}</answer>", "answer": "4", "extra": [1, 2]},
        {"id": "c", "response": "<answer>\\boxed{\\frac{1}{2}}</answer>", "answer": None},
        {"id": "d", "response": "<answer>\\boxed{0.5}</answer>", "answer": "\\frac{1}{2}", "pred": "old"},
    ]
    _write(source, rows)
    out = tmp_path / "graded.jsonl"
    result = runner.invoke(app, ["grade", str(source), "--out", str(out)])
    assert result.exit_code == 1
    assert "line 2: missing field 'response' (fields present: answer, extra, id, text)" in result.output
    assert "line 3: field 'answer' holds null" in result.output
    assert "accuracy 1.0000 (2/2 graded rows)" in result.output
    graded = read_rows(out)
    assert graded[0] == {**rows[0], "pred": "3", "correct": True, "timed_out": False}
    assert graded[1] == {**rows[1], "grade_error": "missing field 'response' (fields present: answer, extra, id, text)"}
    assert graded[2]["grade_error"].startswith("field 'answer' holds null")
    assert graded[3] == {**rows[3], "pred": "0.5", "pred_original": "old", "correct": True, "timed_out": False}


def test_field_names_are_options(tmp_path):
    source = tmp_path / "custom.jsonl"
    _write(source, [{"completion": "<answer>\\boxed{7}</answer>", "gold": "7"}])
    result = runner.invoke(app, ["grade", str(source), "--response-field", "completion", "--gold-field", "gold"])
    assert result.exit_code == 0, result.output
    assert read_rows(tmp_path / "custom.graded.jsonl")[0]["correct"] is True


def test_untagged_outputs_get_a_hint(tmp_path):
    source = tmp_path / "untagged.jsonl"
    _write(source, [{"response": "so \\boxed{7}", "answer": "7"}])
    result = runner.invoke(app, ["grade", str(source)])
    assert result.exit_code == 0
    assert "accuracy 0.0000" in result.output and "--no-answer-tag" in result.output


def test_the_old_name_of_the_answer_tag_rule_still_works_with_a_warning(tmp_path):
    source = tmp_path / "untagged.jsonl"
    _write(source, [{"response": "so \\boxed{7}", "answer": "7"}])
    result = runner.invoke(app, ["grade", str(source), "--any-boxed"])
    assert result.exit_code == 0, result.output
    assert "accuracy 1.0000" in result.output
    assert "warning: --any-boxed is now called --no-answer-tag" in result.output


def test_lines_that_are_not_json_are_reported_and_the_rest_graded(tmp_path):
    source = tmp_path / "outputs.jsonl"
    right = json.dumps({"response": "<answer>\\boxed{1}</answer>", "answer": "1"})
    wrong = json.dumps({"response": "<answer>\\boxed{2}</answer>", "answer": "3"})
    source.write_text(f"{right}\nnot json\n[1, 2]\n\n{wrong}\n", encoding="utf-8")
    out = tmp_path / "graded.jsonl"
    result = runner.invoke(app, ["grade", str(source), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "error: line 2: not valid JSON" in result.output
    assert "error: line 3: expected a JSON object, got list" in result.output
    assert "accuracy 0.5000 (1/2 graded rows)" in result.output
    graded = read_rows(out)  # the input's order, a row in place of each bad line
    assert [row.get("correct") for row in graded] == [True, None, None, False]
    assert graded[1]["grade_error"].startswith("not valid JSON") and graded[2]["grade_error"].startswith("expected")


def test_a_file_with_no_json_line_is_refused(tmp_path):
    source = tmp_path / "broken.csv"
    source.write_text("response,answer\nx,1\n", encoding="utf-8")
    result = runner.invoke(app, ["grade", str(source)])
    assert result.exit_code == 2
    assert "broken.csv:1: not valid JSON" in result.output and "is it JSON Lines?" in result.output
    assert not (tmp_path / "broken.graded.jsonl").exists()


def test_help_explains_the_options():
    result = runner.invoke(app, ["grade", "--help"])
    assert result.exit_code == 0
    for option in ("--response-field", "--gold-field", "--out", "--no-answer-tag", "--deadline", "--workers"):
        assert option in result.output
    assert "--any-boxed" not in result.output  # the old name works but is not offered
