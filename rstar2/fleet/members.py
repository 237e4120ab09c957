"""The engines a fleet drives: in this process, behind HTTP, or in a Ray actor.

Every member offers the same things: ``generate`` (raising ``MemberDown`` when the failure
means the member is gone, not that the request was bad), ``load`` (its KV capacity and use,
requests running and waiting: ``base.EngineLoad``), ``update_weights``, ``reseed`` and
``restart`` (bring a dead member back, where that is possible: a Ray actor is replaced).

``HTTPMember`` reads its load from ``/metrics`` under vLLM's metric names, so the same class
drives ``vllm serve`` and ``rstar2 serve-model`` (which serves the same names); a ``vllm serve``
member that takes new weights is a ``VLLMServerMember`` (``vllm_server``).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import httpx

from rstar2.engines.base import (
    Completion,
    Engine,
    EngineError,
    EngineLoad,
    PausableEngine,
    PauseMode,
    SamplingParams,
)
from rstar2.engines.openai import OpenAIEngine
from rstar2.engines.vllm_metrics import parse_vllm_metrics
from rstar2.errors import Rstar2Error
from rstar2.weights.disk import token_from_env


class MemberDown(Rstar2Error, RuntimeError):
    """The member cannot serve any more (closed engine, refused connection, dead actor)."""


class Member(Protocol):
    """One engine of a fleet; see the module docstring."""

    name: str

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams
                       ) -> list[Completion]: ...

    async def load(self) -> EngineLoad: ...

    async def update_weights(self, state_dict: Mapping, version: int | None = None) -> None: ...

    async def release_cache(self) -> None:
        """As ``engines.base.TrainableEngine.release_cache`` where the member's memory is this
        process's; a no-op for a member in another process, whose memory the update here does
        not share."""
        ...

    async def pause(self, mode: PauseMode) -> None:
        """As ``engines.base.PausableEngine.pause``; ``EngineError`` where this kind cannot."""
        ...

    async def resume(self) -> None: ...

    def reseed(self, seed: int) -> None: ...

    async def restart(self) -> bool:
        """Replace a dead member with a fresh one; False when this kind cannot be replaced."""
        ...

    async def close(self) -> None: ...


class LocalMember:
    """An engine in this process (``HFEngine``); it dies when it is shut down."""

    def __init__(self, engine, name: str = "local"):
        self.engine = engine
        self.name = name

    async def generate(self, prompts, params):
        try:
            return await self.engine.generate(prompts, params)
        except RuntimeError as exc:
            if "closed" in str(exc):
                raise MemberDown(f"{self.name}: {exc}") from exc
            raise

    async def load(self) -> EngineLoad:
        return self.engine.load()

    async def update_weights(self, state_dict: Mapping, version: int | None = None) -> None:
        await self.engine.update_weights(state_dict, version)

    async def release_cache(self) -> None:
        await self.engine.release_cache()

    async def pause(self, mode: PauseMode) -> None:
        if not isinstance(self.engine, PausableEngine):
            raise EngineError(f"{self.name}: {type(self.engine).__name__} cannot take weights while generating")
        await self.engine.pause(mode)

    async def resume(self) -> None:
        await self.engine.resume()

    def reseed(self, seed: int) -> None:
        self.engine.reseed(seed)

    async def restart(self) -> bool:
        return False

    async def close(self) -> None:
        await self.engine.close()


class HTTPMember:
    """An OpenAI-compatible server (vLLM, SGLang, ``rstar2 serve-model``); its load comes from
    ``/metrics``. A refused connection means the member is down; an answered error is the
    request's own."""

    def __init__(self, base_url: str, model: str | None = None, name: str | None = None,
                 timeout_s: float = 600.0, weights_dir: str | None = None,
                 weights_token: str | None = None):
        """``weights_dir``: where weight folders are written for the server to load (one it
        allows); ``weights_token``: the server's weights token (default: $RSTAR2_WEIGHTS_TOKEN)."""
        self.engine: Engine = OpenAIEngine(base_url, model=model, timeout_s=timeout_s)
        self.weights_dir = weights_dir
        token = weights_token or token_from_env()
        self.weights_headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.server = self.engine.base_url.removesuffix("/v1")
        self.name = name or self.server
        self.http = httpx.AsyncClient(timeout=10.0)
        self.weight_version: int | None = None  # a server does not stamp; this member does

    async def generate(self, prompts, params):
        try:
            completions = await self.engine.generate(prompts, params)
        except EngineError as exc:
            if isinstance(exc.__cause__, httpx.TransportError):
                raise MemberDown(f"{self.name}: {exc}") from exc
            raise
        return [c.model_copy(update={"weight_version": self.weight_version}) for c in completions]

    async def load(self) -> EngineLoad:
        try:
            response = await self.http.get(self.server + "/metrics")
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise MemberDown(f"{self.name}: cannot read /metrics: {exc}") from exc
        return parse_vllm_metrics(response.text)

    async def update_weights(self, state_dict: Mapping, version: int | None = None) -> None:
        """Write the weights to a directory this server can read and ask it to load them
        (SGLang's ``/update_weights_from_disk``, which ``rstar2 serve-model`` also serves;
        a ``vllm serve`` member is a ``VLLMServerMember``, which takes weights through vLLM's
        weight-transfer routes instead)."""
        if not state_dict:
            self.weight_version = version
            return
        from safetensors.torch import save_file

        with tempfile.TemporaryDirectory(prefix="rstar2-weights-", dir=self.weights_dir) as folder:
            tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
            await asyncio.to_thread(save_file, tensors, str(Path(folder) / "model.safetensors"))
            await self.call("POST", "/update_weights_from_disk", json={"model_path": folder},
                            headers=self.weights_headers)
        self.weight_version = version

    async def call(self, method: str, route: str, timeout_s: float = 600.0, **kwargs) -> dict:
        """``route`` of the server (beside ``/v1``), its JSON answer: a refused connection
        means the member is down, an answered error is the request's own (``EngineError``)."""
        try:
            response = await self.http.request(method, self.server + route, timeout=timeout_s,
                                               **kwargs)
        except httpx.TransportError as exc:
            raise MemberDown(f"{self.name}: {exc}") from exc
        if response.status_code >= 400:
            raise EngineError(f"{self.name} {route}: {response.status_code} {response.text[:300]}")
        return response.json()

    async def pause(self, mode: PauseMode) -> None:
        raise EngineError(f"{self.name}: a server member cannot take weights while generating "
                          "(asynchronous training needs 'hf' members, in this process or in Ray actors)")

    async def resume(self) -> None:
        """Nothing was paused."""

    async def release_cache(self) -> None:
        """The server's memory is its own (its prefix cache goes with the next weights)."""

    def reseed(self, seed: int) -> None:
        """Servers keep their own randomness."""

    async def restart(self) -> bool:
        return False

    async def close(self) -> None:
        await self.engine.close()
        await self.http.aclose()
