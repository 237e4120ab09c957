"""OpenAIEngine: any OpenAI-compatible completions server, spoken to in token ids.

Works with vLLM (``vllm serve``), SGLang and ``rstar2 serve-model``: prompts go out as token-id
lists on ``/v1/completions`` and the sampled token ids come back through vLLM's
``return_token_ids`` (or, on servers that only know ``return_tokens_as_token_ids``, parsed
from ``logprobs.tokens``), with each token's log-prob (``logprobs=0``: the sampled token only).

For log-probs that match ``engines.base`` (temperature applied), start vLLM with
``--logprobs-mode processed_logprobs``; its default reports the raw model's log-probs.

Each ``generate`` call is one HTTP request; concurrent rollouts make concurrent requests and
the server batches them. A server at its limit of work in flight answers 429; the request is
then sent again after the server's ``Retry-After``, for as long as the client's timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import get_args
from urllib.parse import urlsplit

import httpx

from rstar2.engines.base import Completion, EngineError, FinishReason, SamplingParams


def api_base(url: str) -> str:
    """``url`` with the ``/v1`` API prefix (added when the URL names just a host)."""
    url = url.rstrip("/")
    return url + "/v1" if urlsplit(url).path in ("", "/") else url


class OpenAIEngine:
    """Client of one OpenAI-compatible server; see the module docstring."""

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None,
                 timeout_s: float = 600.0, max_connections: int = 256):
        self.base_url = api_base(base_url)
        self.model = model
        self.timeout_s = timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(
            timeout=timeout_s, headers=headers,
            limits=httpx.Limits(max_connections=max_connections))

    async def model_name(self) -> str:
        """The model to request: the configured one, or the server's first."""
        if self.model is None:
            listing = await self.request("GET", "/models")
            if not listing.get("data"):
                raise EngineError(f"{self.base_url}/models lists no model")
            self.model = listing["data"][0]["id"]
        return self.model

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams
                       ) -> list[Completion]:
        body = {
            "model": await self.model_name(),
            "prompt": [list(p) for p in prompts],
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.stop_token_ids is not None:
            body["stop_token_ids"] = list(params.stop_token_ids)
            body["ignore_eos"] = True  # only the listed ids stop it
        reply = await self.request("POST", "/completions", json=body)
        choices = sorted(reply["choices"], key=lambda c: c["index"])
        if len(choices) != len(prompts):
            raise EngineError(f"asked for {len(prompts)} completions, got {len(choices)}")
        return [completion(c) for c in choices]

    async def request(self, method: str, path: str, **kwargs) -> dict:
        url = self.base_url + path
        give_up = time.monotonic() + self.timeout_s
        while True:
            try:
                response = await self.http.request(method, url, **kwargs)
            except httpx.HTTPError as exc:
                raise EngineError(f"cannot reach {url}: {exc}") from exc
            wait = retry_after(response)
            if wait is None or time.monotonic() + wait > give_up:
                break
            await asyncio.sleep(wait)
        if response.status_code >= 400:
            raise EngineError(f"{url} answered {response.status_code}: {response.text[:500]}")
        return response.json()

    async def close(self) -> None:
        await self.http.aclose()


def retry_after(response: httpx.Response) -> float | None:
    """Seconds to wait before sending a request the server found no room for (429), else None."""
    if response.status_code != 429:
        return None
    try:
        return max(0.0, float(response.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0


def completion(choice: dict) -> Completion:
    """A ``Completion`` from one OpenAI choice carrying token ids and log-probs."""
    logprobs = choice.get("logprobs") or {}
    ids = choice.get("token_ids")
    if ids is None:
        tokens = logprobs.get("tokens") or []
        if not all(t.startswith("token_id:") for t in tokens):
            raise EngineError("the server returned neither token_ids nor token-id logprobs; "
                              "it cannot be used token-in/token-out")
        ids = [int(t.split(":", 1)[1]) for t in tokens]
    values = logprobs.get("token_logprobs")
    if values is None or len(values) != len(ids):
        raise EngineError("the server returned no log-prob for every sampled token")
    reason = choice.get("finish_reason")  # vLLM's own when it says one ('abort', 'repetition')
    reason = reason if reason in get_args(FinishReason) else "stop"
    return Completion(token_ids=list(ids), logprobs=[float(v) for v in values],
                      finish_reason=reason)
