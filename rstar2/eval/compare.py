"""Two eval runs side by side: ``rstar2 eval compare RUN_A RUN_B``.

Contract of ``compare_runs(a, b, top)``: a markdown text with, for every benchmark both
results documents have, each headline metric of A and B and the difference B - A, then the
problems whose accuracy differs, largest change first (at most ``top`` of them, with how many
improved, got worse or stayed the same, and avg@n's B - A over those problems with its paired
bootstrap interval, the one that says whether B is better). Benchmarks only one run has are
named at the end, so a mismatch is visible rather than silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable

from rstar2.eval.metrics import paired_difference
from rstar2.eval.report import pass_at_columns, percent

Formatter = Callable[[float], str]

HEADLINE = (
    ("avg@n", "avg", percent),
    ("maj@n", "maj", percent),
    ("mean len", "mean_response_tokens", lambda v: f"{v:.0f}"),
    ("tool calls", "tool_calls_per_answer", lambda v: f"{v:.2f}"),
    ("tool err %", "tool_error_ratio", percent),
    ("no answer %", "no_answer_share", percent),
    ("truncated %", "truncated_share", percent),
)


def metric_rows(a: dict, b: dict) -> list[tuple[str, float, float, Formatter]]:
    """(label, A value, B value, formatter) for the headline metrics and the shared pass@k."""
    rows = [(label, a[field], b[field], fmt) for label, field, fmt in HEADLINE]
    shared_ks = [k for k in pass_at_columns([a]) if k in b["pass_at"]]
    rows[1:1] = [(f"pass@{k}", a["pass_at"][k], b["pass_at"][k], percent) for k in shared_ks]
    return rows


def signed(a: float, b: float, fmt: Formatter) -> str:
    """B - A formatted like the values, with its sign."""
    text = fmt(abs(b - a))
    return f"+{text}" if b > a else (f"-{text}" if b < a else text)


def benchmark_section(name: str, a: dict, b: dict) -> list[str]:
    lines = [f"## {name}", "", f"| metric | A (n={a['n']}) | B (n={b['n']}) | B - A |", "| --- | --- | --- | --- |"]
    for label, value_a, value_b, fmt in metric_rows(a, b):
        lines.append(f"| {label} | {fmt(value_a)} | {fmt(value_b)} | {signed(value_a, value_b, fmt)} |")
    return lines


def problem_section(problems_a: list[dict], problems_b: list[dict], top: int) -> list[str]:
    """The problems whose accuracy changed, largest change first."""
    by_id_b = {p["problem_id"]: p for p in problems_b}
    pairs = [(p, by_id_b[p["problem_id"]]) for p in problems_a if p["problem_id"] in by_id_b]
    changed = [(pa, pb) for pa, pb in pairs if pa["accuracy"] != pb["accuracy"]]
    paired = paired_difference({p["problem_id"]: p["accuracy"] for p in problems_a},
                               {p["problem_id"]: p["accuracy"] for p in problems_b})
    better, worse = (paired.better, paired.worse) if paired is not None else (0, 0)
    lines = ["", f"{len(pairs)} problems in both: {better} better in B, {worse} worse, "
             f"{len(pairs) - len(changed)} the same."]
    if paired is not None:
        low, high = paired.ci
        lines.append(f"avg@n B - A over them: {signed(0.0, paired.difference, percent)} points, "
                     f"paired 95% CI [{percent(low)}, {percent(high)}]")
    if not changed or top == 0:
        return lines
    changed.sort(key=lambda pair: (-abs(pair[1]["accuracy"] - pair[0]["accuracy"]), pair[0]["problem_id"]))
    lines += ["", "| problem | A correct | B correct | B - A (accuracy) |", "| --- | --- | --- | --- |"]
    for pa, pb in changed[:top]:
        lines.append(f"| {pa['problem_id']} | {pa['correct']}/{pa['samples']} | {pb['correct']}/{pb['samples']} "
                     f"| {signed(pa['accuracy'], pb['accuracy'], percent)} |")
    if len(changed) > top:
        lines.append(f"| ... {len(changed) - top} more | | | |")
    return lines


def compare_runs(a: dict, b: dict, top: int = 20, labels: tuple[str, str] = ("A", "B")) -> str:
    """Markdown comparison of two results documents; see the module docstring."""
    lines = [f"A: {labels[0]}  ", f"B: {labels[1]}", ""]
    shared = [name for name in a["benchmarks"] if name in b["benchmarks"]]
    for name in shared:
        lines += benchmark_section(name, a["benchmarks"][name], b["benchmarks"][name])
        lines += problem_section(a["problems"][name], b["problems"][name], top)
        lines.append("")
    only_a = [name for name in a["benchmarks"] if name not in b["benchmarks"]]
    only_b = [name for name in b["benchmarks"] if name not in a["benchmarks"]]
    if only_a or only_b:
        lines.append(f"Not compared: only in A: {', '.join(only_a) or '-'}; only in B: {', '.join(only_b) or '-'}")
    if not shared:
        lines.append("The runs share no benchmark.")
    return "\n".join(lines).rstrip() + "\n"
