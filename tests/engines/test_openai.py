"""OpenAIEngine against `rstar2 serve-model`'s app (real HTTP, real model): the HTTP engine
returns the embedded engine's greedy tokens and log-probs; the server speaks the OpenAI
completions dialect (text or token prompts, n, errors)."""

import asyncio

import httpx
import pytest

from rstar2.engines.base import SamplingParams
from rstar2.engines.openai import EngineError, OpenAIEngine, api_base
from rstar2.serve.server import create_app
from tests.engines.serving import serving

GREEDY = SamplingParams(temperature=0, max_tokens=16)


@pytest.fixture(scope="module")
def server_url(hf_engine):
    with serving(create_app(hf_engine, "smol")) as url:
        yield url


@pytest.fixture(scope="module")
def prompts(tokenizer):
    questions = ["What is the capital of France?", "Count to five.", "Say hello."]
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                           add_generation_prompt=True) for q in questions]
    return [tokenizer.encode(t, add_special_tokens=False) for t in texts]


async def both(hf_engine, url, prompts, params):
    remote = OpenAIEngine(url)
    try:
        over_http = await remote.generate(prompts, params)
        single = await remote.generate(prompts[:1], params)
        assert remote.model == "smol"  # discovered from /v1/models
    finally:
        await remote.close()
    return over_http, single, await hf_engine.generate(prompts, params)


def test_http_engine_gives_the_embedded_engines_greedy_tokens(hf_engine, server_url, prompts):
    over_http, single, local = asyncio.run(both(hf_engine, server_url, prompts, GREEDY))
    for remote, mine in zip(over_http, local):
        assert remote.token_ids == mine.token_ids
        assert remote.logprobs == pytest.approx(mine.logprobs, abs=1e-4)
        assert remote.finish_reason == mine.finish_reason
    assert single[0].token_ids == local[0].token_ids


def test_stop_token_ids_pass_through(hf_engine, server_url, prompts):
    params = SamplingParams(temperature=0, max_tokens=24, stop_token_ids=())
    over_http, _, local = asyncio.run(both(hf_engine, server_url, prompts[:1], params))
    assert len(over_http[0].token_ids) == 24 and over_http[0].token_ids == local[0].token_ids


def test_server_speaks_the_completions_dialect(server_url, prompts):
    body = {"model": "smol", "prompt": "The sky is", "max_tokens": 5, "temperature": 0, "n": 2,
            "logprobs": 0}
    reply = httpx.post(f"{server_url}/completions", json=body, timeout=60).json()
    assert [c["index"] for c in reply["choices"]] == [0, 1]
    assert reply["choices"][0]["text"] == reply["choices"][1]["text"]  # greedy, same prompt
    assert len(reply["choices"][0]["logprobs"]["token_logprobs"]) == 5
    assert reply["usage"]["completion_tokens"] == 10
    assert httpx.get(f"{server_url}/models").json()["data"][0]["id"] == "smol"

    for bad in ({"prompt": [1, 2], "stream": True}, {"prompt": [1, 2], "model": "other"},
                {"prompt": []}, {"prompt": [1, 2], "max_tokens": 0}, {"prompt": [10**9]}):
        response = httpx.post(f"{server_url}/completions", json=bad, timeout=60)
        assert response.status_code == 400, bad
        assert response.json()["error"]["type"] == "invalid_request_error"


def test_a_request_seed_reaches_the_server(hf_engine, server_url, prompts):
    """OpenAI's per-request ``seed``: serve-model samples as the embedded engine does with it."""
    params = SamplingParams(temperature=1.0, max_tokens=16, stop_token_ids=(), seed=5)
    over_http, _, local = asyncio.run(both(hf_engine, server_url, prompts[:1], params))
    assert over_http[0].token_ids == local[0].token_ids
    other, _, _ = asyncio.run(both(hf_engine, server_url, prompts[:1], params.model_copy(update={"seed": 6})))
    assert other[0].token_ids != local[0].token_ids


def test_unreachable_server_raises_a_clear_error():
    async def call():
        engine = OpenAIEngine("http://127.0.0.1:9", model="x", timeout_s=2)
        try:
            await engine.generate([[1, 2]], GREEDY)
        finally:
            await engine.close()

    with pytest.raises(EngineError, match="cannot reach"):
        asyncio.run(call())


def test_api_base_adds_v1_to_a_bare_host():
    assert api_base("http://h:8000") == "http://h:8000/v1"
    assert api_base("http://h:8000/v1/") == "http://h:8000/v1"
