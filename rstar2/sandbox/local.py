"""Start a sandbox service on this machine for the duration of a ``with`` block.

Used by ``rstar2 chat``/``eval``/``demo`` when no ``--sandbox-url`` is given, and by tests.
The service runs as a child process (``python -m rstar2 sandbox serve``) so that a crash or a
hostile snippet can never take the caller down with it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

READY_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_sandbox(
    workers: int = 2,
    timeout_s: float = 4.0,
    memory_mb: int = 1024,
    queue_size: int | None = None,
    unsafe_no_isolation: bool = False,
) -> Iterator[str]:
    """Yield the URL of a fresh local sandbox service; stop it (and its workers) afterwards."""
    port = free_port()
    argv = [sys.executable, "-m", "rstar2", "sandbox", "serve", "--port", str(port)]
    argv += ["--workers", str(workers), "--timeout-s", str(timeout_s), "--memory-mb", str(memory_mb)]
    if queue_size is not None:
        argv += ["--queue-size", str(queue_size)]
    if unsafe_no_isolation:
        argv.append("--unsafe-no-isolation")
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, process, log)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


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
