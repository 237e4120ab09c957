"""The paper's data filters on real data: integer answers, 8-gram decontamination, difficulty."""

from __future__ import annotations

import json
import re

import pytest

from rstar2.data import (
    DataError,
    Problem,
    find_overlaps,
    load_benchmark,
    overlaps_per_benchmark,
    read_problems,
    split_by_difficulty,
    split_by_pass_rate,
    split_integer_answers,
)
from rstar2.data.benchmarks import PACKAGED_DATA_DIR


def test_integer_filter_keeps_integers_in_any_decoration():
    split = split_integer_answers(read_problems(PACKAGED_DATA_DIR / "hmmt_feb2025.jsonl"))
    assert (len(split.kept), len(split.dropped)) == (14, 16)
    flagged = [p for p in read_problems(PACKAGED_DATA_DIR / "hmmt_feb2025.jsonl") if p.row["answer_is_integer"]]
    assert [row["id"] for row in split.kept] == [p.id for p in flagged]

    decorated = [Problem(id=str(i), problem="p", answer=a, row={"answer": a})
                 for i, a in enumerate(["025", "1,000", "27.0", "-3", "\\frac{1}{2}", "3\\sqrt{2}", "12\\%"])]
    split = split_integer_answers(decorated)
    assert [(row["answer"], row.get("answer_raw")) for row in split.kept] == [
        ("25", "025"), ("1000", "1,000"), ("27", "27.0"), ("-3", None), ("12", "12\\%")]
    assert [p.answer for p in split.dropped] == ["\\frac{1}{2}", "3\\sqrt{2}"]


def planted_copy(problem: Problem) -> str:
    """A benchmark problem as a training set might hold it: recased, rewrapped, in a longer text."""
    text = re.sub(r"\s+", "\n  ", problem.problem.upper())
    return f"Practice problem from a forum. {text} Give your answer as an integer!"


def test_decontamination_finds_planted_overlaps_and_names_the_benchmark_problem():
    benchmarks = [load_benchmark(name) for name in ("math500", "aime2024", "aime2025", "hmmt_feb2025")]
    clean = load_benchmark("gsm8k").problems[:300]
    planted = {
        "plant-aime": benchmarks[1].problems[7],
        "plant-math": benchmarks[0].problems[123],
        "plant-hmmt": benchmarks[3].problems[4],
    }
    train = list(clean)
    for offset, (pid, source) in enumerate(planted.items()):
        train.insert(50 * (offset + 1), Problem(id=pid, problem=planted_copy(source), answer="1", line=9000 + offset))

    overlaps = find_overlaps(train, benchmarks)
    assert [o.id for o in overlaps] == list(planted)
    by_id = {o.id: o for o in overlaps}
    assert planted["plant-aime"].id in by_id["plant-aime"].matches["aime2024"]
    assert planted["plant-math"].id in by_id["plant-math"].matches["math500"]
    assert planted["plant-hmmt"].id in by_id["plant-hmmt"].matches["hmmt_feb2025"]
    assert by_id["plant-aime"].line == 9000 and by_id["plant-aime"].shared_ngrams > 10
    assert overlaps_per_benchmark(overlaps)["aime2024"] >= 1


def test_decontamination_finds_nothing_in_a_clean_set():
    benchmarks = [load_benchmark(name) for name in ("aime2024", "aime2025", "hmmt_feb2025")]
    assert find_overlaps(load_benchmark("gsm8k").problems, benchmarks) == []


def test_decontamination_catches_a_short_exact_copy_and_respects_min_shared():
    bench = [load_benchmark_from_rows("tiny", ["Compute $1+1$.", "Find the sum of all possible values of $n$ here now."])]
    short = Problem(id="s", problem="compute $1+1$", answer="2")
    stock_phrase = Problem(id="p", problem="Find the sum of all possible values of $k$ such that k divides 12.", answer="1")
    assert [o.id for o in find_overlaps([short, stock_phrase], bench)] == ["s", "p"]
    assert [o.id for o in find_overlaps([short, stock_phrase], bench, min_shared=2)] == []


def load_benchmark_from_rows(name: str, texts: list[str]):
    from rstar2.data.benchmarks import Benchmark

    problems = [Problem(id=f"{name}-{i}", problem=text, answer="0") for i, text in enumerate(texts)]
    return Benchmark(name=name, path=None, problems=problems)


def write_samples(path, bench, outcomes: dict[str, list[bool]], partial_tail: bool = False):
    with path.open("w") as handle:
        for pid, corrects in outcomes.items():
            for i, correct in enumerate(corrects):
                handle.write(json.dumps({"bench": bench, "problem_id": pid, "sample": i, "correct": correct}) + "\n")
        if partial_tail:
            handle.write('{"bench": "train", "problem_id": "a", "sam')


def test_difficulty_filter_drops_only_problems_solved_every_time(tmp_path):
    problems = [Problem(id=pid, problem="p", answer="1") for pid in "abcd"]
    samples = tmp_path / "samples.jsonl"
    write_samples(samples, "train", {"a": [True] * 4, "b": [True, True, False, True], "c": [False] * 4,
                                     "d": [True] * 4}, partial_tail=True)
    split = split_by_difficulty(problems, samples, "train")
    assert split.k == 4
    assert [p.id for p in split.kept] == ["b", "c"]
    assert [p.id for p in split.dropped] == ["a", "d"]


def test_pass_rate_filter_keeps_problems_solved_sometimes_in_their_order(tmp_path):
    problems = [Problem(id=pid, problem="p", answer="1") for pid in "edcba"]  # a curriculum's order
    samples = tmp_path / "samples.jsonl"
    write_samples(samples, "train", {"a": [True, False, False, False], "b": [True] * 4, "c": [False] * 4,
                                     "d": [False, True, True, True], "e": [True, False, True, False]})
    split = split_by_pass_rate(problems, samples, "train")
    assert split.k == 4
    assert [p.id for p in split.kept] == ["e", "d", "a"]
    assert [p.id for p in split.always] == ["b"] and [p.id for p in split.never] == ["c"]
    assert split.pass_rates == {"e": 0.5, "d": 0.75, "c": 0.0, "b": 1.0, "a": 0.25}
    write_samples(samples, "train", {"a": [True, False]})  # b..e unsampled: refused, as below
    with pytest.raises(DataError, match=r"4 of 5 problems have fewer than 2 samples"):
        split_by_pass_rate(problems, samples, "train")


def test_difficulty_filter_refuses_an_unfinished_run(tmp_path):
    problems = [Problem(id=pid, problem="p", answer="1") for pid in "abc"]
    samples = tmp_path / "samples.jsonl"
    write_samples(samples, "train", {"a": [True] * 4, "b": [True, True]})
    with pytest.raises(DataError, match=r"2 of 3 problems have fewer than 4 samples.*b, c.*--resume"):
        split_by_difficulty(problems, samples, "train")
    with pytest.raises(DataError, match="no samples of benchmark 'other'"):
        split_by_difficulty(problems, samples, "other")
