"""No measured figures in code, docstrings, field descriptions or recipe comments: they go
stale and differ across machines, so they live in docs/benchmarks.md with the command, date,
commit and machine."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TREES = [REPO / "rstar2", REPO / "recipes"]
SUFFIXES = {".py", ".yaml", ".yml", ".md", ".toml"}
DATA = REPO / "rstar2" / "data" / "benchmarks"  # benchmark problems, not our text

FIGURE = re.compile(
    r"\b(tok|tokens|calls|outputs|samples|rollouts|steps)/s\b"  # throughput
    r"|\bminutes?\b(?!\s*=)"  # prose, not timedelta(minutes=10)
    r"|\d\s?s per\b|\bms per\b|\d\s?ms\b|\d\s?s/step\b"  # latency, step time
    r"|~\s?\d+(\.\d+)?\s?(s|seconds|min)\b"  # "takes ~20 s", "~60 min"
    r"|\d(\.\d+)?\s?[x×] (faster|slower|cheaper)\b",  # measured speed-ups
    re.I)


def figures_in(text: str) -> list[tuple[int, str]]:
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1)
            if FIGURE.search(line)]


def test_no_measured_figures_in_code_or_recipes():
    found = [f"{path.relative_to(REPO)}:{number}: {line}"
             for tree in TREES for path in sorted(tree.rglob("*"))
             if path.suffix in SUFFIXES and DATA not in path.parents
             for number, line in figures_in(path.read_text())]
    assert not found, "measured figures belong in docs/benchmarks.md:\n" + "\n".join(found)


def test_the_pattern_catches_figures_and_spares_plain_text():
    caught = ["measured 296 vs 168 tokens/s", "111 calls/s at concurrency 16", "took 21 minutes",
              "RL ~62 s per step", "about 4 ms per call", "p50 14 ms", "12 x 46.2 s/step",
              "which takes ~20 s", "(~60 min)", "measured 1.8x faster", "3.3× slower"]
    spared = ["stop tokens/strings", "rollouts/step_N.jsonl", "f'{x:.1f} s/step'",
              "tool_timeout_s: 4.0", "deadline_s=2.0", "Wall-clock limit of one tool call (4 s)",
              "a 2 MiB page", "time/step", "timedelta(minutes=10)"]
    assert [text for text in caught if not FIGURE.search(text)] == []
    assert [text for text in spared if FIGURE.search(text)] == []
