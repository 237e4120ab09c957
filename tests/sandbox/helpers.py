"""Calling a sandbox service from tests, synchronously."""

from __future__ import annotations

import httpx

from rstar2.sandbox import RunResult


def run(url: str, code: str, stdin: str = "", timeout_s: float | None = None) -> RunResult:
    body = {"code": code, "stdin": stdin}
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    response = httpx.post(f"{url}/run", json=body, timeout=120)
    response.raise_for_status()
    return RunResult(**response.json())
