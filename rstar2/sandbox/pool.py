"""The warm worker pool behind the service: a bounded queue of calls and N supervised workers.

Promises:

* a call waits in a bounded queue; when the queue cannot take it the pool says so at once
  (``QueueFull``), so the HTTP layer can answer 503 instead of letting callers time out;
* every accepted call is answered: if its worker dies under it (segfault of the worker,
  out-of-memory kill, killed from outside) the call is answered ``killed`` and the worker
  is replaced; if the worker stops answering past the call's deadline plus a grace period it
  is killed and replaced and the call answered ``timeout``;
* the counters of ``metrics.SandboxMetrics`` are kept up to date.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import struct
import time
from dataclasses import dataclass, field

from rstar2.errors import Rstar2Error
from rstar2.sandbox.isolation import WORKER_ENV, call_uids, worker_command, worker_directory
from rstar2.sandbox.metrics import SandboxMetrics
from rstar2.sandbox.protocol import RunRequest, RunResult
from rstar2.sandbox.worker.limits import WorkerLimits
from rstar2.sandbox.worker.procs import child_pids_of
from rstar2.service import READ_TIMEOUT_S

log = logging.getLogger("rstar2.sandbox")

START_TIMEOUT_S = 120.0  # importing sympy and numpy in a cold page cache can take a while
GRACE_S = 3.0  # time a worker gets past a call's deadline to kill, drain and report


class QueueFull(Rstar2Error):
    """The pool cannot accept more calls right now."""


@dataclass(frozen=True)
class PoolConfig:
    """The service's settings (``rstar2 sandbox serve`` options of the same names)."""

    workers: int = 4
    default_timeout_s: float = 4.0
    max_timeout_s: float = 60.0
    queue_size: int = 16384
    isolated: bool = True
    port: int = 8070
    limits: WorkerLimits = field(default_factory=WorkerLimits)
    max_request_mb: float = 8.0  # largest HTTP request body (a batch of calls); larger: 413
    drain_timeout_s: float = 10.0  # on SIGTERM: time the calls in flight get before 503
    read_timeout_s: float = READ_TIMEOUT_S  # a client's time to send headers, then a body


@dataclass
class Job:
    request: dict
    future: asyncio.Future
    queued_at: float = field(default_factory=time.monotonic)


class Worker:
    """One worker process and the pipe protocol to it (see ``rstar2.sandbox.worker``)."""

    def __init__(self, argv: list[str], isolated: bool):
        self.argv = argv
        self.isolated = isolated  # argv starts bubblewrap, whose child is the worker
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=WORKER_ENV,
            cwd=worker_directory(self.isolated),
        )
        ready = await asyncio.wait_for(self.receive(), START_TIMEOUT_S)
        if not ready.get("ready"):
            raise RuntimeError(f"sandbox worker sent {ready!r} instead of ready")

    async def receive(self) -> dict:
        header = await self.process.stdout.readexactly(4)
        (size,) = struct.unpack(">I", header)
        return json.loads(await self.process.stdout.readexactly(size))

    async def call(self, request: dict) -> dict:
        payload = json.dumps(request).encode()
        self.process.stdin.write(struct.pack(">I", len(payload)) + payload)
        await self.process.stdin.drain()
        return await self.receive()

    def kill(self) -> None:
        """Kill what bubblewrap runs, so that bubblewrap reaps it and exits (no zombies left)."""
        if self.process is None or self.process.returncode is not None:
            return
        inner = child_pids_of(self.process.pid) if self.isolated else []
        for pid in inner:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not inner:
            self.process.kill()

    async def stop(self) -> None:
        if self.process is None:
            return
        self.kill()
        try:
            await asyncio.wait_for(self.process.wait(), 5.0)
        except asyncio.TimeoutError:
            self.process.kill()
            await self.process.wait()


class WorkerPool:
    """Feeds queued calls to warm workers; see the module docstring for what it promises."""

    def __init__(self, config: PoolConfig, metrics: SandboxMetrics):
        self.config = config
        self.metrics = metrics
        self.queue: asyncio.Queue[Job] = asyncio.Queue(maxsize=config.queue_size)
        self.workers: list[Worker] = []
        self.tasks: list[asyncio.Task] = []
        self.alive = 0

    async def start(self) -> None:
        uids = call_uids(self.config.port, self.config.workers)
        self.workers = [
            Worker(worker_command(self.config.limits, uid, self.config.isolated), self.config.isolated)
            for uid in uids
        ]
        self.tasks = [asyncio.create_task(self.serve_with(w, str(i))) for i, w in enumerate(self.workers)]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.gather(*(w.stop() for w in self.workers), return_exceptions=True)
        while not self.queue.empty():
            job = self.queue.get_nowait()
            if not job.future.done():
                job.future.set_exception(RuntimeError("sandbox service is shutting down"))

    def deadline_of(self, request: RunRequest) -> float:
        return min(request.timeout_s or self.config.default_timeout_s, self.config.max_timeout_s)

    def submit_many(self, requests: list[RunRequest]) -> list[asyncio.Future]:
        """Queue all requests or none (raises QueueFull)."""
        if self.queue.maxsize - self.queue.qsize() < len(requests):
            self.metrics.rejected.inc(len(requests))
            raise QueueFull
        loop = asyncio.get_running_loop()
        futures = []
        for request in requests:
            payload = {"code": request.code, "stdin": request.stdin, "timeout_s": self.deadline_of(request)}
            future = loop.create_future()
            self.queue.put_nowait(Job(payload, future))
            futures.append(future)
        self.metrics.queue_depth.set(self.queue.qsize())
        return futures

    async def run_many(self, requests: list[RunRequest]) -> list[RunResult]:
        return list(await asyncio.gather(*self.submit_many(requests)))

    async def serve_with(self, worker: Worker, name: str) -> None:
        """Keep one worker alive and feed it jobs, forever; ``name`` labels its metrics."""
        restarts, carried = 0, None
        while True:
            try:
                await worker.start()
            except Exception as error:  # noqa: BLE001 -- retried with back-off, and logged
                log.error("sandbox worker failed to start: %s", error)
                worker.kill()
                await asyncio.sleep(min(30.0, 0.5 * 2**restarts))
                restarts += 1
                continue
            self.alive += 1
            self.metrics.workers_alive.set(self.alive)
            try:
                carried = await self.feed(worker, carried, self.metrics.busy_seconds.labels(name))
            finally:
                self.alive -= 1
                self.metrics.workers_alive.set(self.alive)
                await worker.stop()
            self.metrics.restarts.inc()
            restarts = 0

    async def feed(self, worker: Worker, job: Job | None, busy_seconds) -> Job | None:
        """Run jobs on a started worker until it dies or wedges.

        A worker that dies while idle is noticed at once; a job taken just as it died is
        returned, not run, so the next worker runs it instead of answering it ``killed``.
        """
        death = asyncio.ensure_future(worker.process.wait())
        try:
            while True:
                job = job or await self.next_job(death)
                if job is None or death.done():
                    return job
                if not job.future.done():  # else the caller went away
                    started = time.monotonic()
                    self.metrics.queue_wait.observe(started - job.queued_at)
                    self.metrics.workers_busy.inc()
                    try:
                        outcome, healthy = await self.call(worker, job.request)
                    finally:
                        self.metrics.workers_busy.dec()
                        busy_seconds.inc(time.monotonic() - started)
                    self.metrics.observe(outcome)
                    if not job.future.done():
                        job.future.set_result(outcome)
                    if not healthy:
                        return None
                job = None
        finally:
            death.cancel()

    async def next_job(self, death: asyncio.Future) -> Job | None:
        """The next queued job, or None if the worker dies first."""
        getter = asyncio.ensure_future(self.queue.get())
        await asyncio.wait({getter, death}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():
            getter.cancel()
            return None
        self.metrics.queue_depth.set(self.queue.qsize())
        return getter.result()

    async def call(self, worker: Worker, request: dict) -> tuple[RunResult, bool]:
        """One call on one worker; a dead or wedged worker becomes the call's outcome."""
        try:
            answer = await asyncio.wait_for(worker.call(request), request["timeout_s"] + GRACE_S)
            return RunResult(**answer), True
        except asyncio.TimeoutError:
            note = "[rstar2 sandbox: worker stopped answering past the deadline; it was replaced]\n"
            return RunResult(status="timeout", stderr=note, duration_s=request["timeout_s"]), False
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError):
            note = "[rstar2 sandbox: the worker running this call died; it was replaced]\n"
            return RunResult(status="killed", stderr=note), False
