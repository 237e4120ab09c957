"""Serving for tests that need real HTTP: an ASGI app on a free local port in a background thread,
or ``rstar2 serve-model`` in its own process."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import uvicorn

from rstar2.sandbox.local import free_port
from tests.polling import wait_until


@contextlib.contextmanager
def serving(app):
    """Yield the app's ``/v1`` base URL while it is served; stop it afterwards."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)


@contextlib.contextmanager
def serve_model_process(*options: str):
    """``rstar2 serve-model`` (the embedded model unless ``options`` say otherwise) in its own
    process on a free port, as a user starts it; yields the process and its URL (no ``/v1``),
    once ``/health`` answers. Killed afterwards if it is still running."""
    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen([sys.executable, "-m", "rstar2", "serve-model", "--port", str(port), *options],
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: process.poll() is not None or answers(f"{url}/health"), 300, "serve-model ready")
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"serve-model exited with {process.returncode}: {log.read()[-2000:]}")
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(30)
        log.close()


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
