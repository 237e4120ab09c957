"""Calling a sandbox service from tests, synchronously."""

from __future__ import annotations

import re

import httpx

from rstar2.sandbox import RunResult


def run(url: str, code: str, stdin: str = "", timeout_s: float | None = None) -> RunResult:
    body = {"code": code, "stdin": stdin}
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    response = httpx.post(f"{url}/run", json=body, timeout=120)
    response.raise_for_status()
    return RunResult(**response.json())


def metric(text: str, name: str) -> dict[str, float]:
    """Samples of one metric: label text (or '') -> value."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{(.*)}})? (\S+)$", re.M)
    return {labels or "": float(value) for labels, value in pattern.findall(text)}


def busy_workers(url: str) -> float:
    """How many of the service's workers are running a call now."""
    return metric(httpx.get(f"{url}/metrics").text, "rstar2_sandbox_workers_busy")[""]
