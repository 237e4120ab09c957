"""Worker processes that run one function under a wall-clock deadline, killed when they overrun.

Contract of `DeadlinePool(function_path, workers, deadline_s)`:
- `map(argument_tuples)` returns one `Outcome` per input, in input order. A call that has not
  returned `deadline_s` after it reached its worker is abandoned: the worker gets SIGKILL, a
  fresh one replaces it, and the outcome says `timed_out`. So no input holds the caller for
  much longer than the deadline, whatever sympy does with it.
- An exception raised by the function, or a worker that dies (segfault, out of memory),
  becomes an outcome with `error` set; `map` itself never raises for a bad input.
- Workers are forked by a zygote (`rstar2.reward.worker`): a fresh interpreter that imported
  the function and warmed it up once. A fresh interpreter, so the pool inherits none of the
  caller's threads, locks or main module (it is safe in threaded trainers, notebooks and
  scripts without a `__main__` guard); forked from it, so starting or replacing a worker
  costs a fork, not a second of imports, and the deadline measures the call alone.
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
from multiprocessing.reduction import recv_handle
from pathlib import Path
from typing import Any

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


@dataclass
class _Worker:
    """One forked worker and the call it is running, if any."""

    pid: int
    connection: Connection
    task: int | None = None
    started: float = 0.0

    def start_call(self, task: int, arguments: tuple) -> None:
        self.task = task
        self.started = time.monotonic()
        self.connection.send(arguments)


class _Zygote:
    """The warm process that forks workers and ends them on request."""

    def __init__(self, function_path: str, warmup: Sequence[tuple], memory_limit_mb: int):
        self.function_path = function_path
        pool_end, zygote_end = socket.socketpair()
        command = [
            sys.executable,
            "-m",
            "rstar2.reward.worker",
            str(zygote_end.fileno()),
            function_path,
            json.dumps(list(warmup)),
            str(memory_limit_mb),
        ]
        self.process = subprocess.Popen(
            command, pass_fds=(zygote_end.fileno(),), stdin=subprocess.DEVNULL, env=_zygote_env()
        )
        zygote_end.close()
        self.control = Connection(pool_end.detach())

    def spawn(self) -> _Worker:
        """A new worker; the first call waits for the zygote to finish warming up."""
        try:
            self.control.send("spawn")
            pid = self.control.recv()
            connection = Connection(recv_handle(self.control))
        except (EOFError, OSError) as exc:
            raise RuntimeError(
                f"the worker process for {self.function_path} exited "
                f"(exit code {self.process.wait()}); see its error above"
            ) from exc
        return _Worker(pid=pid, connection=connection)

    def end(self, worker: _Worker, kill: bool) -> int | None:
        """SIGKILL `worker` if `kill` (returns None at once), else reap it (its exit code)."""
        worker.connection.close()
        self.control.send(("kill" if kill else "reap", worker.pid))
        return self.control.recv()

    def close(self) -> None:
        """Let the zygote end its workers and exit."""
        self.control.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _zygote_env() -> dict[str, str]:
    """The caller's environment, with this source tree importable even when not installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_SOURCE_ROOT, env.get("PYTHONPATH")]))
    return env


class DeadlinePool:
    """`workers` concurrent calls of `function_path`, each killed if it overruns `deadline_s`.

    `function_path` is `package.module:function`, resolved inside the worker processes only,
    so the caller never imports the function's (possibly heavy) module. `warmup` holds
    argument tuples (JSON-serialisable) the function is called with once, before any call.
    Safe to share between threads: calls to `map` are serialised.
    """

    def __init__(
        self,
        function_path: str,
        *,
        workers: int | None = None,
        deadline_s: float = 2.0,
        warmup: Sequence[tuple] = (),
        memory_limit_mb: int = 2048,
    ):
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, got {deadline_s}")
        self.deadline_s = deadline_s
        self._owner_pid = os.getpid()
        self._lock = threading.Lock()
        self._zygote = _Zygote(function_path, warmup, memory_limit_mb)
        self._workers: list[_Worker] = []
        try:
            self._workers = [self._zygote.spawn() for _ in range(workers or available_cores())]
        except RuntimeError:
            self._zygote.close()
            raise

    def __enter__(self) -> "DeadlinePool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the current workers."""
        return [worker.pid for worker in self._workers]

    def close(self) -> None:
        """Stop all workers (idempotent; a no-op in a forked child, which does not own them)."""
        if os.getpid() != self._owner_pid or not self._workers:
            return
        for worker in self._workers:
            worker.connection.close()
        self._workers = []
        self._zygote.close()

    def map(
        self,
        argument_tuples: Sequence[tuple],
        on_outcome: Callable[[int, Outcome], None] | None = None,
    ) -> list[Outcome]:
        """Run the function on every argument tuple in parallel; one outcome per input.

        `on_outcome(index, outcome)` is called as each call finishes (e.g. for a progress bar).
        If `map` is interrupted (an exception from `on_outcome`, Ctrl-C), the calls still
        running are killed, so the next `map` starts with idle workers.
        """
        with self._lock:
            if not self._workers:
                raise RuntimeError("the pool is closed")
            try:
                return _Run(self, argument_tuples, on_outcome).until_done()
            except BaseException:
                self._kill_busy()
                raise

    def _kill_busy(self) -> None:
        for worker in [w for w in self._workers if w.task is not None]:
            self._replace(worker, kill=True)

    def _replace(self, worker: _Worker, kill: bool) -> int | None:
        """Swap `worker` for a fresh one; the old one's exit code, if it ended by itself."""
        exit_code = self._zygote.end(worker, kill=kill)
        self._workers[self._workers.index(worker)] = self._zygote.spawn()
        return exit_code


class _Run:
    """One `map` call: the queue of tasks, their outcomes, and the scheduling loop."""

    def __init__(self, pool: DeadlinePool, argument_tuples: Sequence[tuple], on_outcome):
        self.pool = pool
        self.arguments = argument_tuples
        self.on_outcome = on_outcome
        self.queue = deque(range(len(argument_tuples)))
        self.outcomes: list[Outcome | None] = [None] * len(argument_tuples)

    def until_done(self) -> list[Outcome]:
        while self.queue or self._busy():
            self._hand_out_tasks()
            ready = wait([worker.connection for worker in self._busy()], self._time_to_deadline())
            self._collect(ready)
            self._kill_overrunning()
        return self.outcomes

    def _busy(self) -> list[_Worker]:
        return [worker for worker in self.pool._workers if worker.task is not None]

    def _hand_out_tasks(self) -> None:
        for worker in self.pool._workers:
            if worker.task is None and self.queue:
                task = self.queue.popleft()
                worker.start_call(task, self.arguments[task])

    def _time_to_deadline(self) -> float:
        earliest = min(worker.started for worker in self._busy())
        return max(0.0, earliest + self.pool.deadline_s - time.monotonic())

    def _collect(self, ready_connections: list) -> None:
        for worker in [w for w in self._busy() if w.connection in ready_connections]:
            try:
                value, error = worker.connection.recv()
            except EOFError:
                exit_code = self.pool._replace(worker, kill=False)
                self._finish(worker, Outcome(error=f"worker died with exit code {exit_code}"))
                continue
            self._finish(worker, Outcome(value=value, error=error))

    def _kill_overrunning(self) -> None:
        now = time.monotonic()
        for worker in self._busy():
            if now - worker.started >= self.pool.deadline_s:
                self._finish(worker, Outcome(timed_out=True))
                self.pool._replace(worker, kill=True)

    def _finish(self, worker: _Worker, outcome: Outcome) -> None:
        task, worker.task = worker.task, None
        outcome = replace(outcome, seconds=time.monotonic() - worker.started)
        self.outcomes[task] = outcome
        if self.on_outcome is not None:
            self.on_outcome(task, outcome)
