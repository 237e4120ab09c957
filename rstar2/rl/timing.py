"""Wall-clock accounting of a step's phases that overlap: tool calls run while other rollouts
generate, so their time is measured as the wall time during which at least one call was in
flight, not as a sum over calls (which would exceed the step itself at high concurrency).

    tools = TimedRunner(sandbox_client)      # what the agent calls instead of the client
    before = tools.busy_s; ...rollouts...; tools.busy_s - before

``busy_s`` only grows, so batches sampled side by side (asynchronous training) each read the
sandbox's busy time over their own span.
"""

from __future__ import annotations

import time

from rstar2.agent.rollout import CodeRunner
from rstar2.sandbox.protocol import RunResult


class TimedRunner:
    """A ``CodeRunner`` that forwards every call and measures the time calls were in flight."""

    def __init__(self, runner: CodeRunner):
        self.runner = runner
        self.in_flight = 0
        self.busy_since = 0.0
        self.busy_s = 0.0

    async def run(self, code: str, stdin: str = "", timeout_s: float | None = None) -> RunResult:
        if self.in_flight == 0:
            self.busy_since = time.perf_counter()
        self.in_flight += 1
        try:
            return await self.runner.run(code, stdin, timeout_s)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.busy_s += time.perf_counter() - self.busy_since
