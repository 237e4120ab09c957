"""Connections that stall, against each of the three HTTP services started as a user starts them
(``rstar2 sandbox serve``, ``rstar2 view``, ``rstar2 serve-model``) with ``--read-timeout-s``:
each kind of stall is let go within its deadline, and a slow but steady client is not."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlsplit

import pytest

from rstar2.sandbox.local import free_port, local_sandbox
from tests.engines.serving import answers, serve_model_process
from tests.polling import wait_until

READ_TIMEOUT_S = 1.5
SLACK_S = 10.0  # a loaded CI machine may answer late; it must never answer early


@contextlib.contextmanager
def view_process(folder):
    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen([sys.executable, "-m", "rstar2", "view", str(folder), "--port", str(port),
                                "--read-timeout-s", str(READ_TIMEOUT_S)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: process.poll() is not None or answers(f"{url}/health"), 60, "viewer ready")
        assert process.poll() is None, log.seek(0) or log.read()
        yield url
    finally:
        process.kill()
        process.wait(30)
        log.close()


@pytest.fixture(scope="module", params=["sandbox", "view", "serve-model"])
def service_url(request, tmp_path_factory, tiny_models):
    """One of the three services, its read deadline set to ``READ_TIMEOUT_S``."""
    if request.param == "sandbox":
        with local_sandbox(workers=1, read_timeout_s=READ_TIMEOUT_S) as url:
            yield url
    elif request.param == "view":
        with view_process(tmp_path_factory.mktemp("run")) as url:
            yield url
    else:
        with serve_model_process("--model", str(tiny_models["llama"]), "--dtype", "float32",
                                 "--read-timeout-s", str(READ_TIMEOUT_S)) as (_, url):
            yield url


def connect(url: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", urlsplit(url).port), timeout=READ_TIMEOUT_S + SLACK_S)


def until_closed(sock: socket.socket) -> tuple[float, bytes]:
    """Seconds until the server closes ``sock``, and everything it sent before closing."""
    started, received = time.monotonic(), b""
    while chunk := sock.recv(65536):
        received += chunk
    return time.monotonic() - started, received


def health_request(url: str) -> bytes:
    return f"GET /health HTTP/1.1\r\nHost: {urlsplit(url).netloc}\r\n\r\n".encode()


def post_head(url: str, extra: str) -> bytes:
    return (f"POST /run HTTP/1.1\r\nHost: {urlsplit(url).netloc}\r\nContent-Type: application/json\r\n"
            f"{extra}\r\n").encode()


def assert_let_go_on_time(sock: socket.socket, sent_at: float) -> bytes:
    """What the server sent before closing ``sock``, once it is checked to have closed it
    neither before the deadline (counted from ``sent_at``) nor long after."""
    _, received = until_closed(sock)
    waited = time.monotonic() - sent_at
    assert READ_TIMEOUT_S * 0.8 <= waited <= READ_TIMEOUT_S + SLACK_S, waited
    return received


def test_a_connection_that_sends_nothing_is_closed(service_url):
    with connect(service_url) as sock:
        received = assert_let_go_on_time(sock, time.monotonic())
    assert received == b""


def test_half_a_header_is_closed(service_url):
    with connect(service_url) as sock:
        sock.sendall(health_request(service_url)[:20])
        received = assert_let_go_on_time(sock, time.monotonic())
    assert received == b""


def test_half_a_header_after_an_answer_on_a_kept_alive_connection_is_closed(service_url):
    with connect(service_url) as sock:
        sock.sendall(health_request(service_url))
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 "), first
        sock.sendall(health_request(service_url)[:20])
        rest = assert_let_go_on_time(sock, time.monotonic())
    assert b"HTTP/1.1 " not in rest  # no second answer: the request never arrived


def answer_status(received: bytes) -> int:
    return int(received.split(b" ", 2)[1])


def test_headers_and_half_a_body_are_answered_408_and_closed(service_url):
    body = json.dumps({"code": "print(1)"}).encode()
    with connect(service_url) as sock:
        sock.sendall(post_head(service_url, f"Content-Length: {len(body)}\r\n") + body[:5])
        received = assert_let_go_on_time(sock, time.monotonic())
    assert answer_status(received) == 408, received[:300]
    error = json.loads(received.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["code"] == 408 and error["type"] == "request_timeout"
    assert f"{READ_TIMEOUT_S:g} s" in error["message"]


def test_a_body_trickling_one_byte_at_a_time_is_cut_off_at_the_deadline(service_url):
    with connect(service_url) as sock:
        sock.sendall(post_head(service_url, "Transfer-Encoding: chunked\r\n"))
        started = time.monotonic()
        sock.settimeout(0.25)
        received = b""
        while time.monotonic() - started < READ_TIMEOUT_S + SLACK_S:
            try:
                sock.sendall(b"1\r\n \r\n")  # one byte of body, every quarter of a second
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:  # the server closed while we were sending
                break
            if not chunk:
                break
            received += chunk
        elapsed = time.monotonic() - started
    assert READ_TIMEOUT_S * 0.8 <= elapsed <= READ_TIMEOUT_S + SLACK_S
    assert answer_status(received) == 408, received[:300]


def test_a_slow_but_steady_client_within_the_deadline_is_answered(service_url):
    request = health_request(service_url)
    with connect(service_url) as sock:
        for i in range(0, len(request), 8):  # the headers over about half the deadline
            sock.sendall(request[i:i + 8])
            time.sleep(READ_TIMEOUT_S / 2 / (len(request) / 8))
        received = sock.recv(65536)
    assert answer_status(received) == 200, received[:300]
