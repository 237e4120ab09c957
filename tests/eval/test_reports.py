"""The sample log (append, kill damage, resume reading), results documents and run comparison."""

from __future__ import annotations

import json

from rstar2.data.benchmarks import Benchmark
from rstar2.data.problems import Problem
from rstar2.eval.compare import compare_runs
from rstar2.eval.metrics import paired_difference
from rstar2.eval.report import build_results, markdown_report
from rstar2.eval.samples import SampleRecord, open_log, read_outcomes, repair_tail


def record(pid: str, i: int, correct: bool, bench: str = "toy", pred: str | None = "4") -> SampleRecord:
    return SampleRecord(bench=bench, problem_id=pid, sample=i, gold="4", pred=pred, correct=correct,
                        response="<reason>2+2</reason><answer>\\boxed{4}</answer>" * 3, response_tokens=40 + i,
                        generated_tokens=30, turns=1, tool_calls=1, tool_errors=0, stop_reason="answer",
                        truncated=False, seconds=0.5)


def test_log_survives_a_half_written_line_and_appends_after_it(tmp_path):
    path = tmp_path / "samples.jsonl"
    log, done = open_log(path)
    assert done == {}
    for i in range(3):
        log.append(record("p1", i, correct=i != 1))
    log.close()
    whole = path.read_bytes()
    path.write_bytes(whole + json.dumps(record("p2", 0, True).model_dump())[:57].encode())

    assert set(read_outcomes(path)) == {("toy", "p1", 0), ("toy", "p1", 1), ("toy", "p1", 2)}
    log, done = open_log(path)
    assert path.read_bytes() == whole
    assert [done[("toy", "p1", i)].correct for i in range(3)] == [True, False, True]
    log.append(record("p2", 0, True))
    log.close()
    assert set(read_outcomes(path)) == set(done) | {("toy", "p2", 0)}


def test_tail_repair_handles_long_lines_and_a_file_that_is_all_partial(tmp_path):
    path = tmp_path / "samples.jsonl"
    long_line = json.dumps({"x": "y" * 200_000}) + "\n"
    path.write_text(long_line + '{"x": "unfinished')
    repair_tail(path)
    assert path.read_text() == long_line
    repair_tail(path)
    assert path.read_text() == long_line
    path.write_text('{"x": "unfinished' + "z" * 100_000)
    repair_tail(path)
    assert path.read_text() == ""


def test_a_repeated_sample_keeps_its_first_record(tmp_path):
    path = tmp_path / "samples.jsonl"
    log, _ = open_log(path)
    log.append(record("p1", 0, True))
    log.append(record("p1", 0, False))
    log.close()
    assert read_outcomes(path)[("toy", "p1", 0)].correct is True


def toy_benchmark(name: str = "toy") -> Benchmark:
    problems = [Problem(id=f"p{i}", problem=f"question {i}", answer="4") for i in range(1, 4)]
    return Benchmark(name=name, path=None, problems=problems)


def results_of(correct: dict[str, list[bool]], run: dict | None = None) -> dict:
    outcomes = {}
    for pid, flags in correct.items():
        for i, flag in enumerate(flags):
            outcomes[("toy", pid, i)] = record(pid, i, flag)
    return build_results([toy_benchmark()], outcomes, run or {"model": "m"}, n=2)


def test_results_document_and_markdown():
    document = results_of({"p1": [True, True], "p2": [True, False], "p3": [False, False]})
    toy = document["benchmarks"]["toy"]
    assert toy["avg"] == 0.5 and toy["pass_at"] == {"1": 0.5, "2": 2 / 3} and toy["problems"] == 3
    assert [p["correct"] for p in document["problems"]["toy"]] == [2, 1, 0]
    assert document["missing_samples"] == {"toy": 0}
    json.dumps(document)
    table = markdown_report(document)
    assert "| toy | 3 | 2 | 50.0 |" in table and "pass@2" in table and "Unfinished" not in table


def test_results_of_an_unfinished_run_say_what_is_missing():
    document = results_of({"p1": [True, True], "p2": [False]})
    assert document["missing_samples"] == {"toy": 3}
    assert document["benchmarks"]["toy"]["problems"] == 2
    assert "Unfinished" in markdown_report(document)


def test_compare_shows_metrics_side_by_side_and_the_problems_that_changed():
    a = results_of({"p1": [True, True], "p2": [False, False], "p3": [True, False]})
    b = results_of({"p1": [True, False], "p2": [True, True], "p3": [True, False]})
    text = compare_runs(a, b, labels=("runs/a", "runs/b"))
    assert "A: runs/a" in text and "B: runs/b" in text
    assert "| avg@n | 50.0 | 66.7 | +16.7 |" in text
    assert "3 problems in both: 1 better in B, 1 worse, 1 the same." in text
    # per-problem B - A: -0.5, +1, 0: mean +16.7 points; resampled, it ranges from -50 to +100
    (paired,) = [line for line in text.splitlines() if line.startswith("avg@n B - A over them")]
    low, high = (float(v) for v in paired.split("CI [")[1].rstrip("]").split(", "))
    assert "+16.7 points" in paired and -50.0 <= low < 16.7 < high <= 100.0
    rows = [line for line in text.splitlines() if line.startswith(("| p1", "| p2", "| p3"))]
    assert rows == ["| p2 | 0/2 | 2/2 | +100.0 |", "| p1 | 2/2 | 1/2 | -50.0 |"]
    assert "p3" not in text
    summary_only = compare_runs(a, b, top=0)  # --top 0: the counts and the interval, no table
    assert "1 better in B" in summary_only and "avg@n B - A" in summary_only and "| p2 |" not in summary_only


def test_the_paired_difference_resamples_the_shared_problems_together():
    first = {f"p{i}": float(i % 2) for i in range(200)}
    same = paired_difference(first, dict(first))
    assert same.difference == 0.0 and same.ci == (0.0, 0.0) and same.better == same.worse == 0
    # B fixes 20 of A's 100 failures and breaks none: +10 points, an interval that excludes 0
    second = {pid: 1.0 if i < 40 else value for i, (pid, value) in enumerate(first.items())}
    gain = paired_difference(first, second)
    assert gain.problems == 200 and (gain.better, gain.worse) == (20, 0)
    assert abs(gain.difference - 0.1) < 1e-12 and 0.0 < gain.ci[0] < 0.1 < gain.ci[1] < 0.2
    # only the shared problems count; none shared: no difference
    assert paired_difference(first, {"p1": 0.0, "elsewhere": 1.0}).problems == 1
    assert paired_difference(first, {"elsewhere": 1.0}) is None


def test_compare_names_benchmarks_only_one_run_has():
    a = results_of({"p1": [True, True]})
    b = json.loads(json.dumps(a))
    b["benchmarks"]["other"] = b["benchmarks"].pop("toy")
    b["problems"]["other"] = b["problems"].pop("toy")
    text = compare_runs(a, b)
    assert "only in A: toy; only in B: other" in text and "share no benchmark" in text
