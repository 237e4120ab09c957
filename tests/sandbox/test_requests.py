"""What the sandbox service does with requests no well-behaved client sends: non-finite
deadlines, text with no UTF-8 form, bodies over its size limit. Each is refused or answered
in one line, and none costs a worker."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import httpx
import pytest

from rstar2.sandbox import RunResult
from rstar2.sandbox.local import ServiceProcess, free_port, wait_until_ready
from tests.errors import announced_only, chunked, error_message, post_json
from tests.sandbox.helpers import metric, run
from tests.sandbox.procs import worker_pids


@pytest.mark.parametrize("value", [float("nan"), float("-inf"), float("inf")])
def test_a_deadline_that_is_not_a_finite_number_is_refused_with_422(sandbox_url, value):
    single = post_json(f"{sandbox_url}/run", {"code": "print(1)", "timeout_s": value})
    assert error_message(single, 422) == "timeout_s: Input should be a finite number"
    batch = post_json(f"{sandbox_url}/run_batch", {"requests": [{"code": "1"}, {"code": "2", "timeout_s": value}]})
    assert error_message(batch, 422) == "requests.1.timeout_s: Input should be a finite number"


def test_text_with_no_utf8_form_is_an_error_result_and_costs_no_worker(sandbox_url):
    workers = worker_pids(sandbox_url)
    restarts = metric(httpx.get(f"{sandbox_url}/metrics").text, "rstar2_sandbox_worker_restarts_total")
    for field, body in [("stdin", {"code": "print(input())", "stdin": "a\udfffb"}),
                        ("code", {"code": "print('\udfff')"})]:
        result = RunResult(**post_json(f"{sandbox_url}/run", body).json())
        assert result.status == "error" and result.stdout == "" and result.result is None
        assert result.stderr == (f"[rstar2 sandbox: the call's {field} is not valid text (surrogates not "
                                 f"allowed at character {body[field].index(chr(0xdfff))}); it was not run]\n")
    assert run(sandbox_url, "print(input())", stdin="fine\n").stdout == "fine\n"
    assert worker_pids(sandbox_url) == workers
    assert metric(httpx.get(f"{sandbox_url}/metrics").text, "rstar2_sandbox_worker_restarts_total") == restarts


def test_a_request_over_the_size_limit_is_refused_without_being_kept(sandbox_url):
    code = post_json(f"{sandbox_url}/run", {"code": "#" * (10 << 20)})  # read and dropped, then answered
    assert "over this server's limit of 8388608 bytes" in error_message(code, 413)
    stdin = announced_only(sandbox_url, "/run_batch", 50 << 20)  # answered before it is sent
    assert error_message(stdin, 413) == "request body of 52428800 bytes is over this server's limit of 8388608 bytes"
    stdin = "x" * (4 << 20)  # under the default 8 MiB: run
    assert run(sandbox_url, "import sys; print(len(sys.stdin.read()))", stdin=stdin).stdout == f"{4 << 20}\n"


def test_the_size_limit_is_a_setting_and_counts_a_body_of_unannounced_length():
    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")
    argv = [sys.executable, "-m", "rstar2", "sandbox", "serve", "--port", str(port), "--workers", "1",
            "--max-request-mb", "0.01"]  # 10 KiB
    service = ServiceProcess(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log,
                             f"http://127.0.0.1:{port}")
    try:
        wait_until_ready(service.url, service.process, log)
        small = json.dumps({"code": "print(len('" + "y" * 8000 + "'))"}).encode()
        assert RunResult(**chunked(service.url, "/run", [small[:4000], small[4000:]]).json()).stdout == "8000\n"
        big = json.dumps({"code": "print(len('" + "y" * 12000 + "'))"}).encode()
        refused = chunked(service.url, "/run", [big[:6000], big[6000:]])
        assert "over this server's limit of 10485 bytes" in error_message(refused, 413)
    finally:
        service.stop()
