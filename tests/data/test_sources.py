"""Problems from the formats users bring (Parquet, a ``datasets`` folder, a folder laid out as
on the hub, a hub id through an offline HF cache), through a field mapping, with bad rows
reported by number and nothing read from the network."""

from __future__ import annotations

import json

import huggingface_hub
import pytest

from rstar2.data import DataError, FieldMap, read_problems
from rstar2.data.sources import open_source
from tests.data.sets import install_dataset_in_hf_cache, save_dataset, write_parquet

RENAMED = FieldMap(problem="question", answer="final_answer", id="uid")
ROWS = [
    {"uid": "a", "question": "What is 2 + 3?", "final_answer": 5, "level": 1},
    {"uid": "b", "question": "What is 6 * 7?", "final_answer": 42, "level": 2},
]


def summary(problems):
    return [(p.id, p.problem, p.answer) for p in problems]


EXPECTED = [("a", "What is 2 + 3?", "5"), ("b", "What is 6 * 7?", "42")]


def test_parquet_with_renamed_fields_keeps_every_field(tmp_path):
    path = write_parquet(tmp_path / "mine.parquet", [{**row, "final_answer": str(row["final_answer"])} for row in ROWS])
    problems = read_problems(path, RENAMED)
    assert summary(problems) == EXPECTED
    assert problems[1].row["level"] == 2 and problems[1].line == 2
    assert problems[0].source_row(RENAMED) == {**problems[0].row, "uid": "a"}


def test_rows_without_ids_are_named_after_the_source_and_row(tmp_path):
    rows = [{"question": row["question"], "final_answer": str(row["final_answer"])} for row in ROWS]
    problems = read_problems(write_parquet(tmp_path / "mine.parquet", rows), RENAMED)
    assert [p.id for p in problems] == ["mine-1", "mine-2"]


def test_a_bad_parquet_row_is_named_by_its_number_and_what_is_wrong(tmp_path):
    rows = [dict(ROWS[0]), {"uid": "b", "question": "no answer", "final_answer": None, "level": 2},
            {"uid": "c", "question": "", "final_answer": 3, "level": 1}]
    with pytest.raises(DataError) as caught:
        read_problems(write_parquet(tmp_path / "bad.parquet", rows), RENAMED)
    first, second = str(caught.value).splitlines()[1:]
    assert "bad.parquet: 2 bad rows" in str(caught.value)
    assert first == "  row 2: missing 'final_answer' (the answer field)"
    assert second == "  row 3: empty 'question' (the problem field)"


def test_unmapped_fields_say_how_to_map_them(tmp_path):
    with pytest.raises(DataError) as caught:
        read_problems(write_parquet(tmp_path / "mine.parquet", ROWS))
    assert "row 1: missing 'problem' (the row has 'question': map it with data.fields.problem: question" in str(caught.value)


def test_a_saved_dataset_and_a_split_of_a_saved_dataset_dict(tmp_path):
    one = save_dataset(tmp_path / "one", ROWS)
    assert summary(read_problems(one, RENAMED)) == EXPECTED
    both = save_dataset(tmp_path / "both", {"train": ROWS, "test": ROWS[:1]})
    assert summary(read_problems(both, RENAMED, split="test")) == EXPECTED[:1]
    assert open_source(both, split="test").name == "both-test"
    with pytest.raises(DataError, match=r"several splits \(train, test\); choose one"):
        read_problems(both, RENAMED)
    with pytest.raises(DataError, match=r"no split 'dev' \(it has train, test\)"):
        read_problems(both, RENAMED, split="dev")


def test_a_folder_of_files_is_split_by_their_names(tmp_path):
    write_parquet(tmp_path / "set" / "data" / "train-00000-of-00002.parquet", ROWS[:1])
    write_parquet(tmp_path / "set" / "data" / "train-00001-of-00002.parquet", ROWS[1:])
    (tmp_path / "set" / "data" / "dev.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    train = read_problems(tmp_path / "set", RENAMED, split="train")
    assert summary(train) == EXPECTED
    assert summary(read_problems(tmp_path / "set", RENAMED, split="validation")) == EXPECTED[:1]


def test_a_hub_data_set_resolves_offline_through_the_hf_cache_and_its_card(tmp_path, monkeypatch):
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError) as offline:
        read_problems("rstar2-test/arith", RENAMED)
    message = str(offline.value)
    assert "\n" not in message and "HF_HUB_OFFLINE" in message and "hf download rstar2-test/arith" in message
    card = ("---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
            "  - split: test\n    path: main/test-*\n- config_name: other\n  data_files: other/*.jsonl\n---\n# Arith\n")
    install_dataset_in_hf_cache(cache, "rstar2-test/arith", {
        "README.md": card, "main/train-00000-of-00001.parquet": ROWS, "main/test-00000-of-00001.parquet": ROWS[1:],
        "other/all.jsonl": ROWS[:1]})
    assert summary(read_problems("rstar2-test/arith", RENAMED, subset="main", split="train")) == EXPECTED
    assert summary(read_problems("rstar2-test/arith@main", RENAMED, subset="main", split="test")) == EXPECTED[1:]
    assert summary(read_problems("rstar2-test/arith", RENAMED, subset="other")) == EXPECTED[:1]
    with pytest.raises(DataError, match=r"several subsets \(main, other\)"):
        read_problems("rstar2-test/arith", RENAMED)


def test_specs_that_name_nothing_are_refused_in_one_line(tmp_path):
    with pytest.raises(DataError, match="missing.parquet: no such file"):
        read_problems(tmp_path / "missing.parquet")
    with pytest.raises(DataError, match="no such file or folder"):
        read_problems(str(tmp_path / "nowhere" / "data"))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(DataError, match="not a data file"):
        read_problems(tmp_path / "notes.txt")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match="not a readable Parquet file"):
        read_problems(tmp_path / "broken.parquet")
    with pytest.raises(DataError, match="one split"):
        read_problems(save_dataset(tmp_path / "one", ROWS), RENAMED, split="train")


def test_eval_reads_the_same_sources_as_benchmarks(tmp_path):
    from rstar2.data import load_benchmark

    saved = save_dataset(tmp_path / "mine", {"train": ROWS, "test": ROWS[1:]})
    benchmark = load_benchmark(str(saved), fields=RENAMED, split="test")
    assert benchmark.name == "mine-test" and summary(benchmark.problems) == EXPECTED[1:]
    assert load_benchmark("gsm8k").name == "gsm8k"
    with pytest.raises(DataError, match="unknown benchmark 'aime2030'.*hub id"):
        load_benchmark("aime2030")
