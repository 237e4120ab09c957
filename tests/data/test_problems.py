"""Loading problems and benchmarks: custom JSONL files, bad rows, the registry, both data layouts."""

from __future__ import annotations

import json
import shutil

import pytest

from rstar2.data import REGISTRY, DataError, load_benchmark, read_problems, split_specs
from rstar2.data.benchmarks import PACKAGED_DATA_DIR


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_custom_benchmark_reads_rows_and_names_rows_without_id_by_line(tmp_path):
    path = write_lines(tmp_path / "mine.jsonl", [
        json.dumps({"problem": "What is 2+3?", "answer": "5"}),
        "",
        json.dumps({"id": "q7", "problem": "What is 6*7?", "answer": 42, "source": "me"}),
    ])
    benchmark = load_benchmark(str(path))
    assert benchmark.name == "mine"
    assert [(p.id, p.answer, p.line) for p in benchmark.problems] == [("mine-1", "5", 1), ("q7", "42", 3)]
    assert benchmark.problems[1].row["source"] == "me"


def test_every_bad_row_is_reported_with_its_line_number(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", [
        json.dumps({"problem": "fine", "answer": "1"}),
        json.dumps({"problem": "no answer here"}),
        json.dumps({"problem": "   ", "answer": "2"}),
        json.dumps({"question": "old field name", "answer": "3"}),
        json.dumps({"problem": "empty answer", "answer": ""}),
        json.dumps({"id": "dup", "problem": "a", "answer": "1"}),
        json.dumps({"id": "dup", "problem": "b", "answer": "1"}),
    ])
    with pytest.raises(DataError) as caught:
        read_problems(path)
    message = str(caught.value)
    assert "5 bad rows" in message
    assert "line 2: missing 'answer'" in message
    assert "line 3: empty 'problem'" in message
    assert "line 4: missing 'problem' (the row has 'question': map it with data.fields.problem" in message
    assert "line 5: empty 'answer'" in message
    assert "line 7: id 'dup' already used on line 6" in message
    assert "line 1:" not in message


def test_malformed_json_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "broken.jsonl", [json.dumps({"problem": "p", "answer": "1"}), '{"problem": "p",'])
    with pytest.raises(DataError, match=r"broken\.jsonl:2: not valid JSON"):
        read_problems(path)
    path = write_lines(tmp_path / "list.jsonl", [json.dumps({"problem": "p", "answer": "1"}), "[1, 2]"])
    with pytest.raises(DataError, match=r"list\.jsonl:2: expected a JSON object, got list"):
        read_problems(path)


def test_empty_and_missing_files_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match="empty"):
        read_problems(write_lines(tmp_path / "empty.jsonl", []))
    with pytest.raises(DataError, match="no such file"):
        load_benchmark(str(tmp_path / "absent.jsonl"))


def test_unknown_benchmark_lists_the_known_names():
    with pytest.raises(DataError, match="unknown benchmark 'aime2030'.*aime2024.*gsm8k"):
        load_benchmark("aime2030")


def test_packaged_benchmarks_load_by_name_and_from_a_nested_data_dir(tmp_path):
    for name, info in REGISTRY.items():
        packaged = load_benchmark(name)
        assert packaged.path.parent == PACKAGED_DATA_DIR
        nested = tmp_path / info.stem / f"{info.stem}.jsonl"
        nested.parent.mkdir()
        shutil.copy(packaged.path, nested)
        elsewhere = load_benchmark(name, tmp_path)
        assert elsewhere.path == nested and elsewhere.problems == packaged.problems
    sizes = {name: len(load_benchmark(name).problems) for name in REGISTRY}
    assert sizes == {"aime2024": 30, "aime2025": 30, "hmmt_feb2025": 30, "math500": 500, "amc23": 40, "gsm8k": 1319,
                     "gsm8k_train": 7473}


def test_flat_data_dir_layout_is_read(tmp_path):
    shutil.copy(PACKAGED_DATA_DIR / "amc23.jsonl", tmp_path / "amc23.jsonl")
    assert load_benchmark("amc23", tmp_path).path == tmp_path / "amc23.jsonl"
    with pytest.raises(DataError, match="'aime2024' not found in"):
        load_benchmark("aime2024", tmp_path)


def test_benchmark_lists_are_split_and_checked():
    assert split_specs(" aime2024, math500 ,") == ["aime2024", "math500"]
    with pytest.raises(DataError, match="listed twice: math500"):
        split_specs("math500,aime2024,math500")
    with pytest.raises(DataError, match="no benchmark"):
        split_specs(" , ")
