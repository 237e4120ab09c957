"""A run's reports: ``results.json`` (everything, machine-readable) and ``results.md`` (a table).

Contract of ``build_results(benchmarks, outcomes, run)``: the metrics of ``rstar2.eval.metrics``
for every benchmark and every problem, computed from the finished samples in the benchmarks'
own problem order, so the document depends only on which samples exist. Problems with no
samples are left out (and counted in ``missing_samples``), which is what a report of an
unfinished run shows. ``results.json`` holds::

    {"run": {...the run's settings...},
     "benchmarks": {name: {problems, samples, n, avg, avg_ci, pass_at: {"1": ..}, maj, ...}},
     "problems": {name: [{problem_id, samples, correct, accuracy, pass_at, maj, ...}, ...]},
     "missing_samples": {name: count}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from rstar2.data.benchmarks import Benchmark
from rstar2.eval.metrics import BenchmarkStats, ProblemStats, benchmark_stats, problem_stats
from rstar2.eval.samples import SampleKey, SampleOutcome

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"


def build_results(benchmarks: Sequence[Benchmark], outcomes: Mapping[SampleKey, SampleOutcome],
                  run: dict, n: int) -> dict:
    """The results document for the first ``n`` samples of every problem; see the module docstring."""
    document: dict = {"run": run, "benchmarks": {}, "problems": {}, "missing_samples": {}}
    for benchmark in benchmarks:
        per_problem: list[ProblemStats] = []
        samples: list[SampleOutcome] = []
        missing = 0
        for problem in benchmark.problems:
            found = [outcomes[key] for i in range(n) if (key := (benchmark.name, problem.id, i)) in outcomes]
            missing += n - len(found)
            if found:
                per_problem.append(problem_stats(problem.id, problem.answer, found))
                samples.extend(found)
        document["missing_samples"][benchmark.name] = missing
        if per_problem:
            stats = benchmark_stats(benchmark.name, per_problem, samples)
            document["benchmarks"][benchmark.name] = benchmark_entry(stats)
            document["problems"][benchmark.name] = [problem_entry(p) for p in per_problem]
    return document


def benchmark_entry(stats: BenchmarkStats) -> dict:
    entry = asdict(stats)
    entry["pass_at"] = {str(k): v for k, v in stats.pass_at.items()}
    entry["avg_ci"] = list(stats.avg_ci)
    return entry


def problem_entry(stats: ProblemStats) -> dict:
    entry = asdict(stats)
    entry["accuracy"] = stats.accuracy
    entry["pass_at"] = {str(k): v for k, v in stats.pass_at.items()}
    return entry


def percent(value: float) -> str:
    return f"{100 * value:.1f}"


def pass_at_columns(entries: Sequence[dict]) -> list[str]:
    """The k of every pass@k any of ``entries`` has, in increasing order."""
    return sorted({k for entry in entries for k in entry["pass_at"]}, key=int)


def markdown_table(document: dict) -> str:
    """The per-benchmark table of a results document (percentages; lengths in tokens)."""
    entries = list(document["benchmarks"].values())
    ks = pass_at_columns(entries)
    header = ["benchmark", "problems", "n", "avg@n", "95% CI", *[f"pass@{k}" for k in ks], "maj@n",
              "mean len", "median len", "tool calls", "tool err %", "no answer %", "truncated %"]
    rows = [header, ["---"] * len(header)]
    for entry in entries:
        low, high = entry["avg_ci"]
        rows.append([
            entry["name"], str(entry["problems"]), str(entry["n"]), percent(entry["avg"]),
            f"{percent(low)}–{percent(high)}",
            *[percent(entry["pass_at"][k]) if k in entry["pass_at"] else "–" for k in ks],
            percent(entry["maj"]), f"{entry['mean_response_tokens']:.0f}",
            f"{entry['median_response_tokens']:.0f}", f"{entry['tool_calls_per_answer']:.2f}",
            percent(entry["tool_error_ratio"]), percent(entry["no_answer_share"]),
            percent(entry["truncated_share"]),
        ])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows) + "\n"


def markdown_report(document: dict) -> str:
    """``results.md``: what was run, then the table."""
    run = document["run"]
    settings = ", ".join(f"{key}={value}" for key, value in run.items() if key != "benchmarks")
    missing = {name: count for name, count in document["missing_samples"].items() if count}
    note = f"\nUnfinished: samples missing per benchmark: {missing}\n" if missing else ""
    return f"# Evaluation results\n\n{settings}\n\n{markdown_table(document)}{note}"


def write_reports(out_dir: Path, document: dict) -> None:
    """Write ``results.json`` and ``results.md`` into ``out_dir``, each replaced atomically."""
    write_text_atomically(out_dir / RESULTS_JSON, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    write_text_atomically(out_dir / RESULTS_MD, markdown_report(document))


def write_text_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def read_results(run_dir: Path) -> dict:
    """The results document of a run directory (or of a ``results.json`` path)."""
    path = run_dir if run_dir.suffix == ".json" else run_dir / RESULTS_JSON
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results (is this an eval run directory? did it finish?)")
    return json.loads(path.read_text(encoding="utf-8"))
