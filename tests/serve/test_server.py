"""``rstar2 serve-model`` under abuse, as its own process with the real model (or the tiny
one): requests over its limits are refused before any work, a request whose client leaves
stops decoding, the largest request leaves decode rows to the others, sampling settings the
float32 sampler cannot hold are refused, long text is tokenised off the event loop, weight
updates are guarded, and SIGTERM answers every client and exits within its bound."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import select
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

from rstar2.engines.base import SMALLEST_SAMPLED, Completion, SamplingParams
from rstar2.engines.vllm_metrics import parse_vllm_metrics
from rstar2.serve.admission import FairShare, Limits
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
def tiny_server(tiny_models):
    """serve-model on the tiny Llama (SmolLM2's tokenizer, a 4096-token context) with 4 decode
    rows, so a request's share is 2 of them, and 3000 KV tokens one request may hold at once."""
    with serve_model_process("--model", str(tiny_models["llama"]), "--max-batch-size", "4",
                             "--max-request-kv-tokens", "3000", "--dtype", "float32") as (_, url):
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


def in_flight(reading) -> int:
    return reading.running + reading.waiting


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


def send_request(client: socket.socket, fields: dict) -> None:
    """A completions request on a raw connection, so the test can leave without its answer."""
    body = json.dumps({"prompt": PROMPT, **fields}).encode()
    client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def answered(client: socket.socket) -> bool:
    return bool(select.select([client], [], [], 0)[0])


def test_a_small_request_is_answered_while_the_largest_one_decodes(tiny_server):
    with socket.create_connection(("127.0.0.1", urlsplit(tiny_server).port)) as big:
        send_request(big, {"n": 16, "max_tokens": 1000, **ENDLESS})  # 16,000 tokens to decode
        wait_until(lambda: load(tiny_server).running >= 2, 60, "the big request decoding")
        busy = load(tiny_server)
        assert (busy.running, busy.waiting) == (2, 14)  # its share of the 4 rows; the rest wait
        small = complete(tiny_server, max_tokens=4, return_token_ids=True, **ENDLESS)
        assert len(small.json()["choices"][0]["token_ids"]) == 4
        assert not answered(big)  # answered while the big one still decodes its first turn
    # its client gone, the big request's sequences in the engine stop and the others never start
    wait_until(lambda: (load(tiny_server).running, load(tiny_server).waiting) == (0, 0), 30,
               "the big request dropped")


def test_a_request_holds_at_most_its_kv_share_and_one_sequence_over_it_is_refused(tiny_server):
    with socket.create_connection(("127.0.0.1", urlsplit(tiny_server).port)) as client:
        send_request(client, {"n": 3, "max_tokens": 1990, **ENDLESS})  # 2000 KV tokens each
        wait_until(lambda: load(tiny_server).running >= 1, 60, "the request decoding")
        held = load(tiny_server)
        assert (held.running, held.waiting) == (1, 2)  # a second would hold 4000 > 3000
    message = error_message(complete(tiny_server, max_tokens=2991), 400)
    assert message == ("a sequence of the request may hold 3001 tokens (prompt + max_tokens), "
                       "over this server's limit of 3000 tokens one request may hold at once")
    text = error_message(complete(tiny_server, prompt="hi", max_tokens=3000), 400)
    assert "may hold at least 3001 tokens" in text  # refused before tokenising
    assert "n=33 is over this server's limit of 32" in error_message(complete(tiny_server, n=33), 400)
    wait_until(lambda: (load(tiny_server).running, load(tiny_server).waiting) == (0, 0), 30,
               "the request dropped")


def sampled_ids(url: str, **sampling) -> list[int]:
    reply = complete(url, max_tokens=8, return_token_ids=True, **ENDLESS, **sampling)
    return reply.json()["choices"][0]["token_ids"]


@pytest.mark.parametrize("sampling", [{"top_p": SMALLEST_SAMPLED}, {"temperature": SMALLEST_SAMPLED},
                                      {"temperature": 0, "top_p": 1.0}], ids=str)
def test_the_smallest_top_p_or_temperature_accepted_samples_the_argmax(tiny_server, sampling):
    assert sampled_ids(tiny_server, **sampling) == sampled_ids(tiny_server, temperature=0)


@pytest.mark.parametrize("field", ["top_p", "temperature"])
def test_a_top_p_or_temperature_below_float32_is_refused(tiny_server, field):
    message = error_message(post_json(f"{tiny_server}/v1/completions",
                                      {"prompt": PROMPT, field: 1e-300}), 400)
    assert message == (f"{field}: Input should be at least {SMALLEST_SAMPLED} where positive: "
                       "the sampler computes in float32, where a smaller value is zero")


class TurnsEngine:
    """The engine as ``FairShare`` sees it: four decode rows, and each sequence handed over kept
    with its future, for the test to finish when it chooses."""

    class config:
        max_batch_size = 4

    def __init__(self):
        self.handed: list[tuple[list[int], concurrent.futures.Future]] = []

    def checked(self, prompt):
        return prompt

    def submit(self, prompts, params):
        self.handed += [(prompt, concurrent.futures.Future()) for prompt in prompts]
        return [future for _, future in self.handed[-len(prompts):]]

    def prompts(self) -> list[int]:
        return [prompt[0] for prompt, _ in self.handed]

    async def finish(self, *indices: int) -> None:
        """Complete the sequences handed over at ``indices`` (their prompt as their tokens), one
        by one, each taken back by the event loop before the next."""
        for index in indices:
            prompt, future = self.handed[index]
            future.set_result(Completion(token_ids=prompt, logprobs=[0.0], finish_reason="stop"))
            await settled()


async def settled() -> None:
    """Let the event loop run what a future's completion scheduled: a concurrent future's
    result reaches its asyncio wrapper, and then the wrapper's callbacks, in one pass each."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_fair_share_hands_a_request_over_in_turns_keeps_its_order_and_drops_it_when_cancelled():
    async def scenario():
        engine = TurnsEngine()
        limits = Limits(max_n=8, max_completion_tokens=100, max_request_tokens=10_000,
                        max_inflight_tokens=10_000, max_request_share=2, max_request_kv_tokens=1000,
                        max_prompt_bytes=100, context=1000)
        share = FairShare(engine, limits)
        params = SamplingParams(max_tokens=10)
        big = asyncio.ensure_future(share.generate([[i] for i in range(6)], params))
        await asyncio.sleep(0)
        assert engine.prompts() == [0, 1] and share.held == 4  # its share of the four rows
        small = asyncio.ensure_future(share.generate([[100]], params))
        await asyncio.sleep(0)
        assert engine.prompts() == [0, 1, 100]  # a free row at once, not the end of a queue
        await engine.finish(2)
        assert [c.token_ids for c in small.result()] == [[100]] and not big.done()
        await engine.finish(1, 0)  # out of order: each frees a row for the next turn
        assert engine.prompts() == [0, 1, 100, 2, 3]
        await engine.finish(3, 4)
        assert engine.prompts() == [0, 1, 100, 2, 3, 4, 5]
        big.cancel()  # its client left
        await asyncio.gather(big, return_exceptions=True)
        await settled()
        assert [future.cancelled() for _, future in engine.handed[5:]] == [True, True]
        assert not share.busy and share.held == 0

        whole = asyncio.ensure_future(share.generate([[7], [8], [9]], params))
        await asyncio.sleep(0)
        await engine.finish(8, 7, 9)  # last first; the third is handed over when one ends
        assert [c.token_ids for c in whole.result()] == [[7], [8], [9]]  # in prompt order
        assert not share.busy

    asyncio.run(scenario())


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
    """16 tokens finish within the drain even on a loaded machine (a decode step of a few
    hundred ms); 4,000 cannot on any CPU (over 15 ms a step). The four in flight are seen in
    one reading of the metrics (two readings could straddle the short ones' admission)."""
    drain_s = 20.0
    with serve_model_process("--drain-timeout-s", str(drain_s), "--max-batch-size", "4") as (process, url):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            long = [pool.submit(complete, url, 120, max_tokens=4000, **ENDLESS) for _ in range(2)]
            wait_until(lambda: load(url).running == 2, 60, "two long requests decoding")
            short = [pool.submit(complete, url, 120, max_tokens=16, return_token_ids=True, **ENDLESS)
                     for _ in range(2)]
            wait_until(lambda: in_flight(load(url)) == 4, 60, "four requests in flight")
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=drain_s + 30)
            exited = time.monotonic() - signalled
            for request in short:  # finished within the drain
                assert len(request.result().json()["choices"][0]["token_ids"]) == 16
            for request in long:  # could not finish: aborted, and told so
                assert "shutting down" in error_message(request.result(), 503)
    assert exited < drain_s + 30
