"""Worker processes that run one function under a wall-clock deadline, killed when they overrun.

Contract of `DeadlinePool(function, workers, deadline_s)`:
- `map(argument_tuples)` returns one `Outcome` per input, in input order. A call that has not
  returned `deadline_s` after it reached its worker is abandoned: the worker gets SIGKILL, a
  fresh worker replaces it, and the outcome says `timed_out`. So no input can hold the caller
  for much longer than the deadline, whatever sympy does with it.
- An exception raised by the function, or a worker that dies (segfault, out of memory),
  becomes an outcome with `error` set; `map` itself never raises for a bad input.
- Workers are fresh interpreters (`python -m rstar2.reward.worker`), not forks: they inherit
  none of the caller's threads, locks or main module, so the pool is safe in threaded
  trainers, notebooks and scripts without a `__main__` guard. The price is about a second to
  start or replace a worker, paid only after a timeout. Each worker makes one warm-up call
  before it takes work, so the deadline clock measures the call, not imports.
- Each worker has an address-space limit (`memory_limit_mb`): an answer that makes sympy
  allocate without bound raises MemoryError in the worker instead of starving the machine.

Not a sandbox: workers run as the caller's user with its filesystem. It bounds time and
memory of trusted code on untrusted data (answers), not untrusted code.
Deadlines are wall-clock kills of processes; no `signal.alarm`, so callers may use threads.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

READY = "ready"
"""What a worker sends once it has warmed up and can take calls."""
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass(frozen=True)
class Outcome:
    """What became of one call."""

    value: Any = None
    """The function's return value; None when the call timed out or failed."""
    timed_out: bool = False
    """The call overran the deadline and its worker was killed."""
    error: str | None = None
    """The exception the call raised, or how its worker died; None on success."""
    seconds: float = 0.0
    """Wall-clock time from handing the call to a worker until its outcome was known."""


def available_cores() -> int:
    """The number of cores this process may run on."""
    return len(os.sched_getaffinity(0))


class _Worker:
    """One worker process and the call it is running, if any."""

    def __init__(self, function_path: str, warmup: tuple, memory_limit_mb: int):
        parent_end, child_end = socket.socketpair()
        command = [
            sys.executable,
            "-m",
            "rstar2.reward.worker",
            str(child_end.fileno()),
            function_path,
            json.dumps(warmup),
            str(memory_limit_mb),
        ]
        self.process = subprocess.Popen(
            command, pass_fds=(child_end.fileno(),), stdin=subprocess.DEVNULL, env=_worker_env()
        )
        child_end.close()
        self.connection = Connection(parent_end.detach())
        self.ready = False
        self.task: int | None = None
        self.started = 0.0

    def start_call(self, task: int, arguments: tuple) -> None:
        self.task = task
        self.started = time.monotonic()
        self.connection.send(arguments)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.connection.close()


def _worker_env() -> dict[str, str]:
    """The caller's environment, with this source tree importable even when not installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_SOURCE_ROOT, env.get("PYTHONPATH")]))
    return env


class DeadlinePool:
    """`workers` concurrent, deadline-bounded calls of `function_path`, plus one warm spare.

    `function_path` is `package.module:function`, resolved inside the workers only, so the
    caller never imports the function's (possibly heavy) module. `warmup` is an argument
    tuple the function is called with once per worker before it takes work. The spare worker
    takes over at once when one is killed, so the next call does not wait for a restart.
    Safe to share between threads: calls to `map` are serialised.
    """

    def __init__(
        self,
        function_path: str,
        *,
        workers: int | None = None,
        deadline_s: float = 2.0,
        warmup: tuple = (),
        memory_limit_mb: int = 2048,
    ):
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, got {deadline_s}")
        self.deadline_s = deadline_s
        self._function_path = function_path
        self._warmup = warmup
        self._memory_limit_mb = memory_limit_mb
        self.concurrency = workers or available_cores()
        self._workers = [self._new_worker() for _ in range(self.concurrency + 1)]
        self._lock = threading.Lock()
        self._owner_pid = os.getpid()

    def __enter__(self) -> "DeadlinePool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Stop all workers (idempotent; a no-op in a forked child, which does not own them)."""
        if os.getpid() != self._owner_pid:
            return
        for worker in self._workers:
            worker.kill()
        self._workers = []

    def map(
        self,
        argument_tuples: Sequence[tuple],
        on_outcome: Callable[[int, Outcome], None] | None = None,
    ) -> list[Outcome]:
        """Run the function on every argument tuple in parallel; one outcome per input.

        `on_outcome(index, outcome)` is called as each call finishes (e.g. for a progress bar).
        """
        if not self._workers:
            raise RuntimeError("the pool is closed")
        with self._lock:
            return _Run(self, argument_tuples, on_outcome).until_done()

    def _new_worker(self) -> _Worker:
        return _Worker(self._function_path, self._warmup, self._memory_limit_mb)

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self._workers[self._workers.index(worker)] = self._new_worker()


class _Run:
    """The state of one `map` call: queued tasks, outcomes, and the scheduling loop."""

    def __init__(self, pool: DeadlinePool, argument_tuples: Sequence[tuple], on_outcome):
        self.pool = pool
        self.arguments = argument_tuples
        self.on_outcome = on_outcome
        self.queue = deque(range(len(argument_tuples)))
        self.outcomes: list[Outcome | None] = [None] * len(argument_tuples)

    def until_done(self) -> list[Outcome]:
        while self.queue or any(worker.task is not None for worker in self.pool._workers):
            self._hand_out_tasks()
            self._collect(wait(self._watched(), timeout=self._time_to_next_deadline()))
            self._kill_overrunning()
        return self.outcomes

    def _hand_out_tasks(self) -> None:
        busy = sum(worker.task is not None for worker in self.pool._workers)
        for worker in self.pool._workers:
            if worker.ready and worker.task is None and self.queue and busy < self.pool.concurrency:
                busy += 1
                task = self.queue.popleft()
                worker.start_call(task, self.arguments[task])

    def _watched(self) -> list[Connection]:
        return [w.connection for w in self.pool._workers if not w.ready or w.task is not None]

    def _time_to_next_deadline(self) -> float | None:
        busy = [worker.started for worker in self.pool._workers if worker.task is not None]
        if not busy:
            return None
        return max(0.0, min(busy) + self.pool.deadline_s - time.monotonic())

    def _collect(self, ready_connections: list) -> None:
        for worker in [w for w in self.pool._workers if w.connection in ready_connections]:
            try:
                message = worker.connection.recv()
            except EOFError:
                self._worker_died(worker)
                continue
            if message == READY:
                worker.ready = True
            else:
                value, error = message
                self._finish(worker, Outcome(value=value, error=error))

    def _worker_died(self, worker: _Worker) -> None:
        if worker.task is None:
            worker.kill()
            raise RuntimeError(
                f"a worker running {self.pool._function_path} died while starting "
                f"(exit code {worker.process.returncode})"
            )
        error = f"worker died with exit code {worker.process.wait()}"
        self._finish(worker, Outcome(error=error))
        self.pool._replace(worker)

    def _kill_overrunning(self) -> None:
        now = time.monotonic()
        for worker in list(self.pool._workers):
            if worker.task is not None and now - worker.started >= self.pool.deadline_s:
                self._finish(worker, Outcome(timed_out=True))
                self.pool._replace(worker)

    def _finish(self, worker: _Worker, outcome: Outcome) -> None:
        task, worker.task = worker.task, None
        outcome = replace(outcome, seconds=time.monotonic() - worker.started)
        self.outcomes[task] = outcome
        if self.on_outcome is not None:
            self.on_outcome(task, outcome)
