"""The issue's end-to-end CPU run: `rstar2 eval --bench gsm8k --limit 20 -n 2` with the embedded
model and the paper's other defaults, then the stage-3 difficulty filter on its samples."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rstar2.data.benchmarks import PACKAGED_DATA_DIR


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 30,000-token budget: untrained samples ramble to the 8K context
def test_default_protocol_run_on_gsm8k_writes_every_output(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "rstar2", "eval", "--bench", "gsm8k", "--limit", "20", "-n", "2",
                           "--out", str(out)], capture_output=True, text=True, timeout=7200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| gsm8k | 20 | 2 |" in done.stdout and "eval" in done.stderr  # table out, progress bar on stderr

    config = json.loads((out / "config.json").read_text())
    assert (config["n"], config["temperature"], config["max_tokens"], config["max_turns"], config["tools"]) == (
        2, 0.6, 30000, 30, True)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 40 and len({(s["problem_id"], s["sample"]) for s in samples}) == 40
    results = json.loads((out / "results.json").read_text())
    gsm8k = results["benchmarks"]["gsm8k"]
    assert gsm8k["samples"] == 40 and set(gsm8k["pass_at"]) == {"1", "2"}
    assert gsm8k["avg"] == sum(s["correct"] for s in samples) / 40
    assert len(results["problems"]["gsm8k"]) == 20 and (out / "results.md").is_file()

    first20 = tmp_path / "first20.jsonl"
    rows = (PACKAGED_DATA_DIR / "gsm8k_test.jsonl").read_text().splitlines()[:20]
    first20.write_text("\n".join(rows) + "\n")
    hard = tmp_path / "hard.jsonl"
    filtered = subprocess.run([sys.executable, "-m", "rstar2", "data", "difficulty-filter", str(first20), str(out),
                               "--bench", "gsm8k", "-o", str(hard)], capture_output=True, text=True, timeout=300)
    assert filtered.returncode == 0, filtered.stderr
    always_solved = sum(p["correct"] == 2 for p in results["problems"]["gsm8k"])
    assert len(hard.read_text().splitlines()) == 20 - always_solved
