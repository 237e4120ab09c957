"""Readers of the real outputs the reward tests grade (tests/samples, the packaged benchmarks)."""

import json
from pathlib import Path


def read_rows(path: Path) -> list[dict]:
    """All JSON objects of a JSONL file."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def tora_recorded_grade(row: dict) -> bool:
    """ToRA's grade of one GSM8K row: its extracted `pred` equals the gold as a number.

    The files carry no grade field; this rule reproduces ToRA's published accuracy
    (84.3 for ToRA-70B), so it is the grade ToRA recorded.
    """
    try:
        pred = float(row["pred"].replace(",", ""))
    except ValueError:
        return False
    return abs(pred - float(row["answer"].replace(",", ""))) < 1e-4
