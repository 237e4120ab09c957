"""Worker processes that run one function under a deadline, killed when they overrun.

Contract of `DeadlinePool(function_path, workers, deadline_s, cpu_limit_s=None)`:
- `submit(arguments)` queues one call and returns a future of its `Outcome`; `map(argument_tuples)`
  returns one `Outcome` per input, in input order. Calls from any number of threads share
  the workers, first come first served. A call that has not
  returned `deadline_s` after it reached its worker is abandoned: the worker gets SIGKILL, a
  fresh one replaces it, and the outcome says `timed_out`. So no input holds the caller for
  much longer than the deadline, whatever sympy does with it.
- With `cpu_limit_s`, a call is also killed (`timed_out`) once its worker has used that much
  CPU time: a limit on the work a call may do, which a loaded machine does not shrink the way
  it shrinks a wall-clock one (a check gets its whole CPU allowance even while other
  processes take half the cores); `deadline_s` stays the wall-clock bound on the wait. The
  CPU time is read from /proc only once a call has run `cpu_limit_s` of wall-clock time, so
  quick calls cost nothing extra.
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
from concurrent.futures import Future, as_completed
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import recv_handle
from pathlib import Path
from typing import Any

_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])
_CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")  # the unit of utime and stime in /proc/PID/stat


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
    cpu_seconds: float | None = None
    """CPU time the call used in its worker; None when it did not return (killed, died)."""


def available_cores() -> int:
    """The number of cores this process may run on."""
    return len(os.sched_getaffinity(0))


@dataclass
class _Task:
    """One queued call and the future its outcome goes to."""

    arguments: tuple
    future: Future


@dataclass
class _Worker:
    """One forked worker and the call it is running, if any."""

    pid: int
    connection: Connection
    task: _Task | None = None
    started: float = 0.0
    abandoned: bool = False
    """Its caller gave up on the running call: kill it rather than wait for it."""
    cpu_at_start: float = 0.0
    """The worker's CPU seconds when its running call began (a forked process starts at 0)."""
    check_cpu_at: float = 0.0
    """The earliest monotonic time at which the running call can have used its CPU limit."""

    def start_call(self, task: _Task, cpu_limit_s: float | None) -> None:
        self.task = task
        self.started = time.monotonic()
        self.check_cpu_at = self.started + (cpu_limit_s or 0.0)
        self.connection.send(task.arguments)

    def cpu_used(self) -> float | None:
        """CPU seconds the running call has used so far; None where /proc cannot tell."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_bytes()
        except OSError:
            return None
        fields = stat.rpartition(b")")[2].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS_PER_S - self.cpu_at_start


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

    Safe to share between threads, and built for it: every caller's calls go into one queue
    that a dispatcher thread hands to whichever worker is free, so a trainer grading each
    rollout as it ends (one `submit` or `map` per rollout, from many threads or an event
    loop) keeps every worker busy instead of waiting for the previous caller's calls.
    """

    def __init__(
        self,
        function_path: str,
        *,
        workers: int | None = None,
        deadline_s: float = 2.0,
        cpu_limit_s: float | None = None,
        warmup: Sequence[tuple] = (),
        memory_limit_mb: int = 2048,
    ):
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, got {deadline_s}")
        if cpu_limit_s is not None and not 0 < cpu_limit_s <= deadline_s:
            raise ValueError(f"cpu_limit_s must be positive and at most deadline_s, got {cpu_limit_s}")
        self.deadline_s = deadline_s
        self.cpu_limit_s = cpu_limit_s
        self._owner_pid = os.getpid()
        self._lock = threading.Lock()
        self._queue: deque[_Task] = deque()
        self._closed = False
        self._zygote = _Zygote(function_path, warmup, memory_limit_mb)
        self._workers: list[_Worker] = []
        try:
            self._workers = [self._zygote.spawn() for _ in range(workers or available_cores())]
        except RuntimeError:
            self._zygote.close()
            raise
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._dispatcher = threading.Thread(target=self._dispatch, name="deadline-pool", daemon=True)
        self._dispatcher.start()

    def __enter__(self) -> "DeadlinePool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the current workers."""
        return [worker.pid for worker in self._workers]

    def close(self) -> None:
        """Stop all workers (idempotent; a no-op in a forked child, which does not own them).

        Calls still queued or running end with a RuntimeError."""
        if os.getpid() != self._owner_pid or not self._workers:
            return
        with self._lock:
            self._closed = True
        self._wake()
        self._dispatcher.join()
        stranded = [task.future for task in self._queue if task.future.set_running_or_notify_cancel()]
        for worker in self._workers:
            worker.connection.close()
            if worker.task is not None:
                stranded.append(worker.task.future)
        for future in stranded:
            if not future.done():
                future.set_exception(RuntimeError("the pool was closed"))
        self._workers, self._queue = [], deque()
        self._zygote.close()
        self._wake_reader.close()
        self._wake_writer.close()

    def submit(self, arguments: tuple) -> Future:
        """Queue one call; its future holds the `Outcome` (it never raises for a bad input)."""
        task = _Task(arguments, Future())
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            self._queue.append(task)
        self._wake()
        return task.future

    def map(
        self,
        argument_tuples: Sequence[tuple],
        on_outcome: Callable[[int, Outcome], None] | None = None,
    ) -> list[Outcome]:
        """Run the function on every argument tuple in parallel; one outcome per input.

        `on_outcome(index, outcome)` is called, in this thread, as each call finishes (e.g.
        for a progress bar). If `map` is interrupted (an exception from `on_outcome`,
        Ctrl-C), its calls still queued are dropped and those running are killed.
        """
        futures = [self.submit(tuple(arguments)) for arguments in argument_tuples]
        index = {future: i for i, future in enumerate(futures)}
        try:
            for future in as_completed(futures):
                if on_outcome is not None:
                    on_outcome(index[future], future.result())
        except BaseException:
            self._abandon(futures)
            raise
        return [future.result() for future in futures]

    def _abandon(self, futures: list[Future]) -> None:
        """Drop these calls: cancel the queued ones, kill the workers running the others."""
        for future in futures:
            future.cancel()
        with self._lock:
            doomed = set(futures)
            for worker in self._workers:
                if worker.task is not None and worker.task.future in doomed:
                    worker.abandoned = True
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_writer.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already woken (buffer full) or closing

    def _dispatch(self) -> None:
        """The dispatcher thread: hand out calls, collect outcomes, kill overruns, until closed.

        If it fails (the zygote died, so no worker can be replaced), the pool closes and every
        waiting caller gets the error instead of waiting forever."""
        try:
            self._dispatch_until_closed()
        except BaseException as error:  # noqa: BLE001 -- handed to every waiting caller
            with self._lock:
                self._closed = True
                stranded = [t for t in self._queue] + [w.task for w in self._workers if w.task is not None]
                self._queue.clear()
            for task in stranded:
                if not task.future.done():
                    task.future.set_exception(RuntimeError(f"the grading pool failed: {error}"))

    def _dispatch_until_closed(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                self._hand_out_tasks()
            busy = self._busy()
            ready = wait([self._wake_reader, *(w.connection for w in busy)], self._time_to_deadline(busy))
            if self._wake_reader in ready:
                self._drain_wakes()
            self._collect([w for w in busy if w.connection in ready])
            self._kill_overrunning_or_abandoned()

    def _drain_wakes(self) -> None:
        try:
            while self._wake_reader.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _busy(self) -> list[_Worker]:
        return [worker for worker in self._workers if worker.task is not None]

    def _hand_out_tasks(self) -> None:
        for worker in self._workers:
            while worker.task is None and self._queue:
                task = self._queue.popleft()
                if task.future.set_running_or_notify_cancel():  # False: cancelled while queued
                    worker.start_call(task, self.cpu_limit_s)

    def _time_to_deadline(self, busy: list[_Worker]) -> float | None:
        """Seconds until some busy worker reaches its deadline or may have used its CPU limit."""
        if not busy:
            return None
        earliest = min(min(worker.started + self.deadline_s, worker.check_cpu_at) if self.cpu_limit_s
                       else worker.started + self.deadline_s for worker in busy)
        return max(0.0, earliest - time.monotonic())

    def _collect(self, ready: list[_Worker]) -> None:
        for worker in ready:
            try:
                value, error, cpu = worker.connection.recv()
            except EOFError:
                exit_code = self._replace(worker, kill=False)
                self._finish(worker, Outcome(error=f"worker died with exit code {exit_code}"))
                continue
            used, worker.cpu_at_start = cpu - worker.cpu_at_start, cpu
            self._finish(worker, Outcome(value=value, error=error, cpu_seconds=used))

    def _kill_overrunning_or_abandoned(self) -> None:
        now = time.monotonic()
        for worker in self._busy():
            if worker.abandoned or now - worker.started >= self.deadline_s or self._over_cpu_limit(worker, now):
                self._replace(worker, kill=True)  # before the outcome: its caller may look
                self._finish(worker, Outcome(timed_out=True) if not worker.abandoned
                             else Outcome(error="abandoned by its caller"))

    def _over_cpu_limit(self, worker: _Worker, now: float) -> bool:
        """Whether the worker's call has used its CPU limit; if not yet, when to look again
        (the soonest it could: a call uses at most one core). Without /proc, wall-clock time
        stands in for CPU time."""
        if self.cpu_limit_s is None or now < worker.check_cpu_at:
            return False
        used = worker.cpu_used()
        if used is None or used >= self.cpu_limit_s:
            return True
        worker.check_cpu_at = now + self.cpu_limit_s - used
        return False

    def _finish(self, worker: _Worker, outcome: Outcome) -> None:
        with self._lock:  # against `_abandon` marking the worker's next call
            task, worker.task, worker.abandoned = worker.task, None, False
        if not task.future.done():
            task.future.set_result(replace(outcome, seconds=time.monotonic() - worker.started))

    def _replace(self, worker: _Worker, kill: bool) -> int | None:
        """Swap `worker` for a fresh one; the old one's exit code, if it ended by itself."""
        exit_code = self._zygote.end(worker, kill=kill)
        with self._lock:
            self._workers[self._workers.index(worker)] = self._zygote.spawn()
        return exit_code
