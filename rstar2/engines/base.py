"""The engine contract: token ids in, token ids and their log-probs out.

Every engine (embedded transformers, an OpenAI-compatible HTTP server, in-process vLLM)
implements one coroutine::

    completions = await engine.generate(prompts, params)

``prompts`` are token-id lists (the caller tokenises once and never again); each
``Completion`` holds the sampled ids exactly as the model produced them, the log-prob of each
under the sampling distribution, and why generation stopped. Engines batch whatever is
pending, so many coroutines may call ``generate`` at once (one per rollout) without a barrier
between them.

Log-prob convention: ``log softmax(logits / temperature)`` at the sampled token, before any
top-p truncation (the distribution a trainer recomputes from the same tokens); at
temperature 0 (greedy) the plain ``log softmax(logits)``. Stop tokens (end of turn) are part of
the returned ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

FinishReason = Literal["stop", "length"]


class SamplingParams(BaseModel):
    """How to sample one completion."""

    model_config = ConfigDict(frozen=True)

    temperature: float = Field(1.0, ge=0.0, description="Softmax temperature; 0 means greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass (1 = off).")
    max_tokens: int = Field(256, ge=1, description="Most new tokens to generate.")
    stop_token_ids: tuple[int, ...] | None = Field(
        None,
        description="Token ids that end the completion (kept in the output). None means the "
        "model's own end-of-sequence ids; an empty tuple means never stop early.",
    )
    stop: tuple[str, ...] = Field(
        (), description="Strings that end the completion once the generated text contains one."
    )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class Completion(BaseModel):
    """One generated continuation of one prompt."""

    token_ids: list[int] = Field(description="Sampled token ids, stop token included.")
    logprobs: list[float] = Field(
        description="Log-prob of each sampled token (see the module docstring for the convention)."
    )
    finish_reason: FinishReason = Field(
        description="'stop': a stop token or string ended it; 'length': max_tokens was reached."
    )


@runtime_checkable
class Engine(Protocol):
    """A text generator working on token ids; see the module docstring."""

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Completion]:
        """One completion per prompt, in order."""
        ...

    async def close(self) -> None:
        """Release threads, connections and memory."""
        ...
