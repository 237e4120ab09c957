"""``rstar2 serve-model`` under abuse, as its own process with the real model: requests over its
limits are refused before any work, a request whose client leaves stops decoding, long text is
tokenised off the event loop, weight updates are guarded, and SIGTERM answers every client and
exits within its bound."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

import httpx
import pytest
import torch
from safetensors.torch import save_file

from rstar2.engines.fleet.members import parse_vllm_metrics
from tests.engines.serving import serve_model_process
from tests.errors import announced_only, error_message, post_json
from tests.polling import wait_until

TOKEN = "test-weights-token-0123456789"
PROMPT = list(range(1000, 1010))  # ten token ids
CONTEXT = 8192  # SmolLM2's
ENDLESS = {"ignore_eos": True, "stop_token_ids": []}  # decodes until max_tokens
LIMITS = ["--max-n", "4", "--max-batch-size", "4", "--max-inflight-tokens", "3000",
          "--max-prompt-bytes", "20000000", "--dtype", "float32"]


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("weights")


@pytest.fixture(scope="module")
def server(weights_dir):
    """serve-model with small, explicit limits and weight updates allowed under ``weights_dir``."""
    with serve_model_process(*LIMITS, "--weights-dir", str(weights_dir), "--weights-token", TOKEN) as (_, url):
        yield url


@pytest.fixture(scope="module")
def default_server():
    """serve-model as a user starts it: every limit sized to the model, weight updates off."""
    with serve_model_process() as (_, url):
        yield url


def complete(url: str, timeout: float = 60, **fields) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json={"prompt": PROMPT, **fields}, timeout=timeout)


def load(url: str):
    return parse_vllm_metrics(httpx.get(f"{url}/metrics", timeout=10).text)


def test_requests_over_the_limits_are_refused_before_any_work(server):
    assert "n=1000000 is over this server's limit of 4" in error_message(
        complete(server, timeout=30, n=1_000_000, max_tokens=1), 400)
    assert f"max_tokens={CONTEXT + 1} is over this server's limit of {CONTEXT}" in error_message(
        complete(server, max_tokens=CONTEXT + 1), 400)
    capacity = 4 * CONTEXT  # --max-batch-size x the context: the default per-request limit
    message = error_message(complete(server, prompt=[PROMPT, PROMPT], n=4, max_tokens=CONTEXT - 10), 400)
    assert f"asks for at least {8 * (CONTEXT - 9)} tokens" in message and f"limit of {capacity} per request" in message
    text = "word " * 3000  # about 3000 tokens: five such prompts are over the limit only once tokenised
    message = error_message(complete(server, prompt=[text] * 5, max_tokens=4000), 400)
    assert "asks for at least" not in message and f"limit of {capacity} per request" in message
    nan = post_json(f"{server}/v1/completions", {"prompt": PROMPT, "temperature": float("nan")})
    assert error_message(nan, 400) == "temperature: Input should be a finite number"
    after = load(server)
    assert after.running == after.waiting == 0


def test_a_client_that_leaves_stops_its_generation_and_frees_its_room(server):
    port = urlsplit(server).port
    with socket.create_connection(("127.0.0.1", port)) as client:
        body = json.dumps({"prompt": PROMPT, "max_tokens": 2000, **ENDLESS}).encode()
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_until(lambda: load(server).running == 1, 60, "the request decoding")
        full = complete(server, max_tokens=2000)  # 2010 more tokens than the 3000 in flight allow
        assert "limit of 3000 tokens in flight" in error_message(full, 429)
        assert full.headers["Retry-After"] == "1"
    wait_until(lambda: load(server).running == 0, 15, "decoding stopped after the client left")
    # its 2010 tokens are free again: 1501 more fit (they would not beside it)
    assert complete(server, prompt=[7] * 1500, max_tokens=1).status_code == 200


def test_long_text_is_tokenised_off_the_event_loop(server):
    text = "the sum of 12345 and 6789 is " * 350_000  # 10 MB: seconds of tokenising
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        big = pool.submit(httpx.post, f"{server}/v1/completions", json={"prompt": text}, timeout=120)
        answered = 0
        while not big.done():
            assert httpx.get(f"{server}/health", timeout=2).status_code == 200
            answered += not big.done()
            time.sleep(0.05)
        assert f"exceeds the model's {CONTEXT}-token context" in error_message(big.result(), 400)
    assert answered >= 3  # /health kept answering while the text was tokenised


def test_default_limits_refuse_an_oversized_text_unread_and_speak_one_error_shape(default_server):
    message = error_message(httpx.post(f"{default_server}/v1/completions", timeout=30,
                                       json={"prompt": "x" * 10_000_000}), 400)
    assert "a text prompt of 10000000 bytes is over this server's limit" in message
    lone = post_json(f"{default_server}/v1/completions", {"prompt": "a\udfffb"})
    assert "not valid Unicode" in error_message(lone, 400)
    assert "prompt: Field required" in error_message(
        httpx.post(f"{default_server}/v1/completions", json={}, timeout=10), 400)
    assert error_message(httpx.get(f"{default_server}/v2/nothing", timeout=10), 404) == "Not Found"
    huge = announced_only(default_server, "/v1/completions", 200 << 20)  # answered before it is sent
    assert "request body of 209715200 bytes is over this server's limit of 33554432 bytes" in error_message(huge, 413)
    off = httpx.post(f"{default_server}/update_weights_from_disk", json={"model_path": "/tmp"}, timeout=10)
    assert "weight updates are off" in error_message(off, 403)


def push(url: str, folder, token: str | None = TOKEN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{url}/update_weights_from_disk", json={"model_path": str(folder)},
                      headers=headers, timeout=120)


def weights(folder, tensors: dict):
    folder.mkdir(exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def greedy_ids(url: str) -> list[int]:
    reply = complete(url, max_tokens=4, temperature=0, return_token_ids=True, **ENDLESS).json()
    return reply["choices"][0]["token_ids"]


def test_weight_updates_need_the_token_a_folder_under_the_allowed_one_and_matching_names(
        server, weights_dir, tmp_path, hf_engine):
    norm = hf_engine.model.state_dict()["model.norm.weight"].clone()
    zeros = weights(weights_dir / "zeros", {"model.norm.weight": torch.zeros_like(norm)})
    assert "Authorization: Bearer" in error_message(push(server, zeros, token=None), 401)
    assert "Authorization: Bearer" in error_message(push(server, zeros, token="x" * 20), 401)
    outside = weights(tmp_path / "outside", {"model.norm.weight": norm})
    assert "is not under the weights directory" in error_message(push(server, outside), 403)
    (weights_dir / "sneaky").mkdir()
    (weights_dir / "sneaky" / "model.safetensors").symlink_to(outside / "model.safetensors")
    assert "points outside" in error_message(push(server, weights_dir / "sneaky"), 403)
    unknown = weights(weights_dir / "unknown", {"no.such.weight": norm})
    message = error_message(push(server, unknown), 400)
    assert "1 of 1 tensors name no parameter of the served model (no.such.weight)" in message
    assert "nothing was loaded" in message
    misshapen = weights(weights_dir / "misshapen", {"model.norm.weight": norm[:-1]})
    assert "have another shape" in error_message(push(server, misshapen), 400)

    before = greedy_ids(server)
    assert push(server, zeros).json() == {"success": True, "message": "loaded 1 tensors"}
    assert greedy_ids(server) == [0, 0, 0, 0]  # a zero final norm: all logits equal, argmax 0
    assert push(server, weights(weights_dir / "restore", {"model.norm.weight": norm})).status_code == 200
    assert greedy_ids(server) == before


def test_weight_updates_need_a_token_to_be_turned_on(tmp_path):
    env = {name: value for name, value in os.environ.items() if name != "RSTAR2_WEIGHTS_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "rstar2", "serve-model", "--weights-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and "weight updates need a token" in done.stderr


def test_sigterm_drains_what_can_finish_aborts_the_rest_and_exits_within_its_bound():
    drain_s = 10.0
    with serve_model_process("--drain-timeout-s", str(drain_s), "--max-batch-size", "4") as (process, url):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            long = [pool.submit(complete, url, 120, max_tokens=4000, **ENDLESS) for _ in range(2)]
            wait_until(lambda: load(url).running == 2, 60, "two long requests decoding")
            short = [pool.submit(complete, url, 120, max_tokens=40, return_token_ids=True, **ENDLESS)
                     for _ in range(2)]
            wait_until(lambda: load(url).running + load(url).waiting == 4, 60, "four requests in flight")
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=drain_s + 30)
            exited = time.monotonic() - signalled
            for request in short:  # finished within the drain
                assert len(request.result().json()["choices"][0]["token_ids"]) == 40
            for request in long:  # could not finish: aborted, and told so
                assert "shutting down" in error_message(request.result(), 503)
    assert exited < drain_s + 30
