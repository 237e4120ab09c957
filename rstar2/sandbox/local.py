"""Start a sandbox service on this machine for the duration of a ``with`` block.

Used by ``rstar2 chat``/``eval``/``demo`` when no ``--sandbox-url`` is given, and by tests;
``start_service`` is the same without the ``with`` (``rstar2.cluster.sandboxes`` starts one per
node in a Ray actor). The service runs as a child process (``python -m rstar2 sandbox serve``)
so that a crash or a hostile snippet can never take the caller down with it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

import httpx

READY_TIMEOUT_S = 180.0


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class ServiceProcess:
    """A running ``rstar2 sandbox serve`` child and where it answers."""

    process: subprocess.Popen
    log: IO[str]
    url: str

    def stop(self) -> None:
        """Stop the service and wait for it (its workers die with it: bubblewrap's
        ``--die-with-parent``)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def start_service(host: str = "127.0.0.1", workers: int = 2, timeout_s: float = 4.0,
                  memory_mb: int = 1024, queue_size: int | None = None,
                  unsafe_no_isolation: bool = False, die_with_parent: bool = False,
                  read_timeout_s: float | None = None) -> ServiceProcess:
    """A fresh service listening on ``host``, returned once every worker is warm. With
    ``die_with_parent`` the kernel kills it when this process dies, however it dies (what a
    Ray actor that owns services needs: nothing outlives it)."""
    port = free_port(host)
    argv = [sys.executable, "-m", "rstar2", "sandbox", "serve", "--host", host, "--port", str(port)]
    argv += ["--workers", str(workers), "--timeout-s", str(timeout_s), "--memory-mb", str(memory_mb)]
    if queue_size is not None:
        argv += ["--queue-size", str(queue_size)]
    if unsafe_no_isolation:
        argv.append("--unsafe-no-isolation")
    if read_timeout_s is not None:
        argv += ["--read-timeout-s", str(read_timeout_s)]
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(),
                               preexec_fn=killed_with(os.getpid()) if die_with_parent else None)
    service = ServiceProcess(process, log, f"http://{host}:{port}")
    try:
        wait_until_ready(service.url, process, log)
    except BaseException:
        service.stop()
        raise
    return service


def killed_with(parent: int):
    """A ``preexec_fn``: the child gets SIGKILL when ``parent`` exits (``PR_SET_PDEATHSIG``),
    and exits at once if ``parent`` is already gone."""
    def arm() -> None:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
    return arm


@contextmanager
def local_sandbox(
    workers: int = 2,
    timeout_s: float = 4.0,
    memory_mb: int = 1024,
    queue_size: int | None = None,
    unsafe_no_isolation: bool = False,
    read_timeout_s: float | None = None,
) -> Iterator[str]:
    """Yield the URL of a fresh local sandbox service; stop it (and its workers) afterwards."""
    service = start_service(workers=workers, timeout_s=timeout_s, memory_mb=memory_mb,
                            queue_size=queue_size, unsafe_no_isolation=unsafe_no_isolation,
                            read_timeout_s=read_timeout_s)
    try:
        yield service.url
    finally:
        service.stop()


def wait_until_ready(url: str, process: subprocess.Popen, log) -> None:
    """Poll /health until every worker is warm; raise with the service's output if it dies."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"sandbox service exited with code {process.returncode}:\n{log.read()[-4000:]}")
        try:
            health = httpx.get(f"{url}/health", timeout=2).json()
            if health["workers_alive"] == health["workers"]:
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"sandbox service at {url} not ready after {READY_TIMEOUT_S:g}s")
