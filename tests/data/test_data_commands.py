"""`rstar2 data` over a Parquet file with renamed fields: the filters read it through --field and
write the rows back under their own names, and difficulty-filter's output is a keep-list."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from rstar2.cli import app
from rstar2.data import FieldMap, read_ids, read_problems
from tests.data.sets import write_parquet
from tests.data.test_filters import write_samples

FIELDS = ["--field", "problem=question", "--field", "answer=final_answer", "--field", "id=uid"]
RENAMED = FieldMap(problem="question", answer="final_answer", id="uid")


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_difficulty_filter_output_is_the_hard_list_a_recipe_keeps(tmp_path):
    source = write_parquet(tmp_path / "train.parquet", [
        {"uid": uid, "question": f"Problem {uid}?", "final_answer": "1"} for uid in ("a", "b", "c")])
    (tmp_path / "run").mkdir()
    write_samples(tmp_path / "run" / "samples.jsonl", "train", {"a": [True] * 2, "b": [True, False], "c": [False] * 2})
    out = tmp_path / "hard.jsonl"
    result = CliRunner().invoke(app, ["data", "difficulty-filter", str(source), str(tmp_path / "run"), "-o", str(out), *FIELDS])
    assert result.exit_code == 0, result.output
    assert "kept 2 problems not solved 2/2, dropped 1" in result.output
    assert [row["uid"] for row in rows_of(out)] == ["b", "c"] and "id" not in rows_of(out)[0]
    assert read_ids(out, RENAMED) == {"b", "c"}
    assert [p.id for p in read_problems(out, RENAMED)] == ["b", "c"]
    (tmp_path / "ids.txt").write_text("b\nc\n")
    assert read_ids(tmp_path / "ids.txt") == {"b", "c"}


def test_integer_filter_rewrites_the_mapped_answer_field(tmp_path):
    source = write_parquet(tmp_path / "mixed.parquet", [
        {"uid": "a", "question": "q1", "final_answer": "1,000"}, {"uid": "b", "question": "q2", "final_answer": "x+1"}])
    out = tmp_path / "int.jsonl"
    result = CliRunner().invoke(app, ["data", "integer-filter", str(source), "-o", str(out), *FIELDS])
    assert result.exit_code == 0, result.output
    assert rows_of(out) == [{"uid": "a", "question": "q1", "final_answer": "1000", "final_answer_raw": "1,000"}]


def test_a_bad_field_option_is_one_line(tmp_path):
    source = write_parquet(tmp_path / "x.parquet", [{"question": "q", "final_answer": "1"}])
    for bad, said in ((["--field", "question"], "expected ROLE=NAME"), (["--field", "prompt=question"], "unknown role")):
        result = CliRunner().invoke(app, ["data", "integer-filter", str(source), "-o", str(tmp_path / "o.jsonl"), *bad])
        assert result.exit_code == 2 and said in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, ["data", "integer-filter", str(source), "-o", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2 and "row 1: missing 'problem' (the row has 'question'" in result.output
    assert not (tmp_path / "o.jsonl").exists()
