"""The processes behind `rstar2.reward.pool`: one warm zygote that forks the workers.

`python -m rstar2.reward.worker FD FUNCTION WARMUP MEMORY_MB` starts the zygote. It talks to
the pool over the Unix socket whose descriptor it is given; it imports `FUNCTION`
(`package.module:function`) and calls it on each argument list of the JSON list `WARMUP`, so
that every worker it forks starts with imports done (sympy imports much on first use) and
caches warm. Then it
serves requests, one at a time:

- `"spawn"`: fork a worker; reply with its pid, then pass the pool its end of a new socket.
  The worker caps its address space at `MEMORY_MB` (0: no cap) and answers each argument
  tuple it receives with `(value, None, cpu)` or `(None, error text, cpu)` until its socket
  closes, `cpu` being its own CPU seconds so far (the pool's baseline for the next call's
  CPU-time limit; a forked process starts at zero).
- `("kill", pid)`: SIGKILL the worker and reply at once with None; the kernel tears down
  its memory in the background, and the zygote reaps it later.
- `("reap", pid)`: reap a worker that ended by itself, reply with its exit code.

A worker is reaped only after the pool has let go of it, so a pid the pool holds can never
be reused by another process meanwhile. When the pool's socket closes, the zygote kills
its remaining workers and exits. Forking is safe here because the zygote runs no threads.
Nothing is written to stdout (which is the caller's).
"""

import importlib
import json
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import send_handle

_ERROR_TEXT_LIMIT = 300


def resolve(function_path: str) -> Callable:
    """The function named `package.module:function`."""
    module_name, _, name = function_path.partition(":")
    return getattr(importlib.import_module(module_name), name)


def limit_memory(megabytes: int) -> None:
    """Cap this process's address space, so runaway allocations raise MemoryError."""
    if megabytes:
        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def serve(connection: Connection, function: Callable) -> None:
    """Worker loop: apply `function` to each argument tuple received, send back the result."""
    while True:
        try:
            arguments = connection.recv()
        except EOFError:
            return
        try:
            value, error = function(*arguments), None
        except Exception as exc:  # noqa: BLE001  (the error is the result, for the caller)
            value, error = None, f"{type(exc).__name__}: {exc}"[:_ERROR_TEXT_LIMIT]
        connection.send((value, error, time.process_time()))


def spawn_worker(control: Connection, function: Callable, memory_mb: int) -> int:
    """Fork a worker serving `function`; hand the pool its socket. Returns the worker's pid."""
    pool_end, worker_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            control.close()
            pool_end.close()
            limit_memory(memory_mb)
            serve(Connection(worker_end.detach()), function)
        finally:
            os._exit(0)
    worker_end.close()
    control.send(pid)
    send_handle(control, pool_end.fileno(), pid)
    pool_end.close()
    return pid


def reap(pid: int) -> int:
    """Wait for worker `pid` to end; its exit code (negative: the signal that ended it)."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def reap_finished(pids: set[int]) -> None:
    """Reap, without waiting, those of `pids` that have ended; they leave the set."""
    for pid in list(pids):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            pids.discard(pid)


def run_zygote(control: Connection, function: Callable, memory_mb: int) -> None:
    """Serve the pool's requests (see the module docstring) until its socket closes."""
    workers: set[int] = set()
    killed: set[int] = set()
    while True:
        try:
            request = control.recv()
        except EOFError:
            break
        reap_finished(killed)
        if request == "spawn":
            workers.add(spawn_worker(control, function, memory_mb))
            continue
        action, pid = request
        workers.discard(pid)
        if action == "kill":
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
            control.send(None)
        else:
            control.send(reap(pid))
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    for pid in workers | killed:
        reap(pid)


def main(argv: list[str]) -> None:
    descriptor, function_path, warmup_json, memory_mb = argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    control = Connection(int(descriptor))
    function = resolve(function_path)
    for arguments in json.loads(warmup_json):
        function(*arguments)
    run_zygote(control, function, int(memory_mb))


if __name__ == "__main__":
    main(sys.argv[1:])
