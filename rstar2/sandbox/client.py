"""Async client of the sandbox service: batching, a concurrency limit, several servers.

``await client.run(code, stdin)`` looks like one call, but concurrent calls are gathered
into ``/run_batch`` requests (up to ``max_batch`` calls: whatever was submitted in the same
event-loop turn, or within ``batch_wait_s`` when that is set), which is what keeps thousands
of tool calls per step cheap without adding latency to a lone call.

Failure policy, which is deliberately loud:

* 503 (queue full) -> wait ``Retry-After`` (with jitter) and send again, to the next server,
  for up to ``overload_wait_s`` in total;
* transport errors (refused, reset, timed out) -> the server is marked down for a while and
  the calls not yet answered are retried on the next server with exponential back-off,
  ``retries`` times (a call may then run twice: snippets are expected to be repeatable);
* anything else, or retries exhausted -> ``SandboxUnavailable`` / ``SandboxError`` raised to
  every caller of the batch. A service that cannot be reached never becomes a fake tool output.

The HTTP client is aiohttp's: measured on the same service, it costs the caller about a third
of the CPU time per request that httpx did (see docs/sandbox-cluster.md), and at concurrency 1
that time is on every tool call's latency.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections.abc import Sequence

import aiohttp

from rstar2.errors import Rstar2Error
from rstar2.sandbox.protocol import RunRequest, RunResult

DOWN_FOR_S = 5.0
# A server refused, reset or dropped the connection, or cut a result stream short.
TRANSPORT_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError)


class SandboxError(Rstar2Error, RuntimeError):
    """The service answered something other than results (a bug or a bad request)."""


class SandboxUnavailable(SandboxError):
    """No sandbox server could be reached (after retries)."""


class SandboxClient:
    """Client of one or more sandbox servers; use as ``async with SandboxClient(urls) as c``."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        max_concurrency: int = 256,
        max_batch: int = 32,
        batch_wait_s: float = 0.0,
        retries: int = 4,
        backoff_s: float = 0.2,
        overload_wait_s: float = 600.0,
        http_timeout_s: float = 120.0,
    ):
        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
        if not self.urls:
            raise ValueError("SandboxClient needs at least one server URL")
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.overload_wait_s = overload_wait_s
        self.slots = asyncio.Semaphore(max_concurrency)
        self.http_timeout_s = http_timeout_s
        self.session: aiohttp.ClientSession | None = None  # made in the event loop, on first use
        self.next_url = itertools.cycle(range(len(self.urls)))
        self.down_until = [0.0] * len(self.urls)
        self.pending: list[tuple[RunRequest, asyncio.Future]] = []
        self.flush_handle: asyncio.Handle | None = None
        self.in_flight: set[asyncio.Task] = set()

    async def __aenter__(self) -> SandboxClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self.in_flight:
            await asyncio.gather(*self.in_flight, return_exceptions=True)
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def run(self, code: str, stdin: str = "", timeout_s: float | None = None) -> RunResult:
        """Run one snippet; raises SandboxUnavailable when no server can run it."""
        request = RunRequest(code=code, stdin=stdin, timeout_s=timeout_s)
        async with self.slots:
            future = asyncio.get_running_loop().create_future()
            self.pending.append((request, future))
            if len(self.pending) >= self.max_batch:
                self.flush()
            elif self.flush_handle is None:
                loop = asyncio.get_running_loop()
                self.flush_handle = (
                    loop.call_later(self.batch_wait_s, self.flush) if self.batch_wait_s > 0 else loop.call_soon(self.flush)
                )
            return await future

    async def run_many(self, requests: Sequence[RunRequest]) -> list[RunResult]:
        return list(
            await asyncio.gather(*(self.run(r.code, r.stdin, r.timeout_s) for r in requests))
        )

    def flush(self) -> None:
        """Send what is pending as one batch."""
        if self.flush_handle is not None:
            self.flush_handle.cancel()
            self.flush_handle = None
        batch, self.pending = self.pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self.send(batch))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    async def send(self, batch: list[tuple[RunRequest, asyncio.Future]]) -> None:
        """Run a batch, handing each caller its result as soon as the server streams it."""
        unanswered = dict(enumerate(batch))
        try:
            await self.stream_batch(unanswered)
        except Exception as error:  # noqa: BLE001 -- handed to every waiting caller
            for _, future in unanswered.values():
                if not future.done():
                    future.set_exception(error)

    def pick_server(self) -> int:
        """Round-robin over servers, skipping those recently found down (unless all are)."""
        now = time.monotonic()
        for _ in range(len(self.urls)):
            index = next(self.next_url)
            if self.down_until[index] <= now:
                return index
        return min(range(len(self.urls)), key=self.down_until.__getitem__)

    def open_stream(self, url: str, body: dict):
        """POST a batch to one server, asking for results streamed as they finish."""
        if self.session is None:
            self.session = aiohttp.ClientSession(
                # A limit on each wait for bytes, not on the whole stream: a batch's results
                # may keep arriving for longer than any one wait.
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.http_timeout_s,
                                              sock_read=self.http_timeout_s),
                connector=aiohttp.TCPConnector(limit=64),
            )
        return self.session.post(f"{url}/run_batch", params={"stream": "true"}, json=body)

    async def stream_batch(self, unanswered: dict[int, tuple[RunRequest, asyncio.Future]]) -> None:
        """Send the unanswered calls to a server until all are answered (see module docstring).

        Results arrive one JSON line each, in completion order, so one slow call does not hold
        back the others. A connection lost midway resends only what was not answered.
        """
        transport_failures, overload_deadline = 0, time.monotonic() + self.overload_wait_s
        errors: list[str] = []
        while unanswered:
            order = list(unanswered)
            body = {"requests": [unanswered[i][0].model_dump(exclude_none=True) for i in order]}
            server = self.pick_server()
            url = self.urls[server]
            try:
                async with self.open_stream(url, body) as response:
                    if response.status == 503:
                        if time.monotonic() > overload_deadline:
                            raise SandboxUnavailable(f"sandbox servers overloaded for {self.overload_wait_s:g}s")
                        await asyncio.sleep(float(response.headers.get("Retry-After", 1)) * random.uniform(0.5, 1.5))
                        continue
                    if response.status != 200:
                        text = (await response.read()).decode(errors="replace")
                        raise SandboxError(f"{url}/run_batch answered {response.status}: {text[:500]}")
                    await self.take_results(response, unanswered, order)
            except TRANSPORT_ERRORS as error:
                self.down_until[server] = time.monotonic() + DOWN_FOR_S
                errors.append(f"{url}: {type(error).__name__}: {error}")
                transport_failures += 1
                if transport_failures > self.retries:
                    raise SandboxUnavailable(
                        f"no sandbox server reachable after {transport_failures} attempts: "
                        + "; ".join(errors[-len(self.urls):])
                    ) from error
                await asyncio.sleep(self.backoff_s * 2 ** (transport_failures - 1) * random.uniform(0.5, 1.5))
                continue
            if unanswered and len(unanswered) == len(order):
                raise SandboxError(f"{url} closed the result stream without answering")

    @staticmethod
    async def take_results(response: aiohttp.ClientResponse, unanswered: dict, order: list[int]) -> None:
        """Hand each streamed result line to its caller as it arrives."""
        pending = b""
        async for chunk in response.content.iter_any():
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                if line:
                    answer = json.loads(line)
                    _, future = unanswered.pop(order[answer["index"]])
                    if not future.done():
                        future.set_result(RunResult(**answer["result"]))
