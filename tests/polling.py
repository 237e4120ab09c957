"""Waiting on a condition with a bound, for tests whose next step needs something to have
happened in another thread or process (a sleep would be a guess at how long that takes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout_s: float = 60.0, what: str = "condition") -> None:
    """Polls ``condition`` until it is true; fails the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout_s:g} s"
        time.sleep(0.02)


async def until(condition: Callable[[], object], timeout_s: float = 60.0, what: str = "condition") -> None:
    """``wait_until`` for a coroutine: the event loop keeps running while it waits."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout_s:g} s"
        await asyncio.sleep(0.01)
