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

Engines a trainer samples from also meet ``TrainableEngine``: they take new weights between
steps (``update_weights``), reseed their sampling per step (``reseed``), and say whether they
generate with the trainer's very model (``samples_from``: colocated, so the sampled log-probs
are the old policy's and no weights need copying).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, Hashable, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from rstar2.errors import Rstar2Error

FinishReason = Literal["stop", "length", "abort", "error", "repetition"]

SMALLEST_SAMPLED = 2.0**-126
"""The smallest positive temperature or top-p a request may ask for: the smallest normal float32
(``torch.finfo(torch.float32).tiny``). Samplers compute in float32, where a smaller positive
value is zero or a subnormal that GPUs flush to zero: a temperature to divide by, a top-p whose
nucleus would hold nothing."""


def sampler_float(value: float) -> float:
    """``value`` unless it is positive and below ``SMALLEST_SAMPLED`` (refused: the sampler would
    see zero). The message names the bound, not the value, as every validation message does."""
    if 0.0 < value < SMALLEST_SAMPLED:
        raise PydanticCustomError(
            "float32_underflow", "Input should be at least {smallest} where positive: the sampler "
            "computes in float32, where a smaller value is zero", {"smallest": SMALLEST_SAMPLED})
    return value


SamplerFloat = Annotated[float, AfterValidator(sampler_float)]
"""A temperature or top-p: 0 or a float32 the sampler can use (``sampler_float``)."""


class SamplingParams(BaseModel):
    """How to sample one completion."""

    model_config = ConfigDict(frozen=True)

    temperature: SamplerFloat = Field(1.0, ge=0.0, description="Softmax temperature; 0 means "
                                      "greedy, else at least SMALLEST_SAMPLED.")
    top_p: SamplerFloat = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass (1 = "
                                "off), at least SMALLEST_SAMPLED.")
    max_tokens: int = Field(256, ge=1, description="Most new tokens to generate.")
    stop_token_ids: tuple[int, ...] | None = Field(
        None,
        description="Token ids that end the completion (kept in the output). None means the "
        "model's own end-of-sequence ids; an empty tuple means never stop early.",
    )
    stop: tuple[str, ...] = Field(
        (), description="Strings that end the completion once the generated text contains one."
    )
    seed: int | None = Field(
        None, ge=0,
        description="Seed of the request's own random stream (vLLM's and OpenAI's per-request "
        "seed): the same seed, prompt and weights sample the same tokens whatever else the "
        "engine batches beside it. Applies to every prompt of the call. None draws from the "
        "engine's generator (``reseed``).",
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
        description="'stop': a stop token or string ended it; 'length': max_tokens was reached; "
        "vLLM's other endings, as it reports them: 'abort' (the request was aborted, e.g. by a "
        "pause of the server), 'error' (a request-level internal error), 'repetition' (vLLM "
        "detected a repetitive pattern and stopped it)."
    )
    weight_version: int | None = Field(
        None, description="The weights it was sampled under: the version last handed to the "
        "engine's update_weights (the trainer passes the learner step whose weights they are); "
        "None where no versioned weights were ever loaded. Where new weights arrived while it "
        "was generating (``PausableEngine``), the oldest of them.")
    token_versions: list[int] | None = Field(
        None, description="The weight version each token was sampled under, where the engine "
        "took new weights while this completion was generating (a 'keep' pause); None when "
        "every token has ``weight_version``.")


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


@runtime_checkable
class TrainableEngine(Engine, Protocol):
    """An engine a trainer samples rollouts from and hands each step's new weights to."""

    def samples_from(self, model: object) -> bool:
        """Whether this engine generates with ``model`` itself (colocated): then its sampled
        log-probs are that model's, and ``update_weights({})`` only drops stale caches."""
        ...

    def reseed(self, seed: int) -> None:
        """Restart the sampling random stream at ``seed`` (the trainer does so every step, so
        a resumed step samples as the interrupted one did where the engine allows it)."""
        ...

    async def update_weights(self, state_dict: Mapping[str, Any], version: int | None = None
                             ) -> None:
        """Load ``state_dict`` (parameter name -> tensor; empty when colocated) and drop every
        cached key/value the old weights computed; every completion sampled after carries
        ``version`` (``Completion.weight_version``), so a skipped sync shows. Called with no
        request in flight."""
        ...

    async def release_cache(self) -> None:
        """Forget every cached key/value and free its memory where it is this process's, with
        no request in flight. A synchronous trainer calls it once a step's sampling is done,
        so that the update beside it has that memory: the weights pushed after the update
        would make the cache stale anyway."""
        ...


PauseMode = Literal["keep", "abort"]


@runtime_checkable
class PausableEngine(TrainableEngine, Protocol):
    """A trainable engine that takes new weights while requests are in flight, as vLLM's
    ``pause_generation`` / ``resume_generation`` do: what asynchronous training pushes its
    weights through (``rl.asynchronous``)."""

    async def pause(self, mode: PauseMode) -> None:
        """Stop generating until ``resume``; ``update_weights`` may then be called with requests
        in flight. 'keep': running requests wait with their keys and values and go on under the
        weights loaded by then (each token stamped with the version that sampled it; the keys
        already cached stay as the old weights computed them); 'abort': running requests end
        now with finish_reason 'abort' and the tokens sampled so far (a caller continues them
        as a new request, prefilled afresh). Queued requests wait either way; a cached prefix
        no running request reads is dropped with the old weights."""
        ...

    async def resume(self) -> None:
        """Generate again."""
        ...


class EngineLoad(BaseModel):
    """What a scheduler reads from an engine: its KV memory and its queue, the numbers vLLM
    serves at ``/metrics`` (``vllm:cache_config_info{kv_cache_size_tokens}``,
    ``vllm:kv_cache_usage_perc``, ``vllm:num_requests_running``/``_waiting``,
    ``vllm:num_preemptions_total``)."""

    kv_capacity_tokens: int = Field(ge=0, description="Tokens of KV the engine can hold.")
    kv_used_tokens: int = Field(ge=0, description="Tokens of KV held by running requests now.")
    kv_peak_tokens: int = Field(0, ge=0, description="Most KV tokens held at once since the "
                                "engine started (0 where the engine does not say).")
    running: int = Field(ge=0, description="Requests being decoded.")
    waiting: int = Field(ge=0, description="Requests queued, not yet admitted.")
    preemptions: int = Field(0, ge=0, description="Requests evicted from KV to be recomputed.")
    busy_s: float | None = Field(None, description="Seconds the engine spent computing since it "
                                 "started (None where the engine does not say).")
    generation_tokens: int = Field(0, ge=0, description="Tokens decoded since the engine started "
                                   "(vLLM's ``vllm:generation_tokens_total``).")
    inter_token_seconds: float = Field(0.0, ge=0, description="Sum of the inter-token latencies "
                                       "of every decoded token since the engine started (the "
                                       "sum of vLLM's ``vllm:inter_token_latency_seconds`` "
                                       "histogram): with ``inter_tokens``, the decode speed a "
                                       "running sequence sees.")
    inter_tokens: int = Field(0, ge=0, description="How many latencies that sum holds (the "
                              "histogram's count).")


class EngineError(Rstar2Error, RuntimeError):
    """An engine could not be reached or refused the request (a server, a vLLM engine)."""


class TrajectoryLost(Rstar2Error, RuntimeError):
    """The engine that held this trajectory is gone: run the trajectory again from its start."""


Result = TypeVar("Result")


@runtime_checkable
class TrajectoryScheduler(Protocol):
    """An engine that schedules whole trajectories, not single requests (the fleet)."""

    def trajectory(self, need_tokens: int, group: Hashable = None
                   ) -> AbstractAsyncContextManager[Engine]:
        """The scope of one trajectory needing ``need_tokens`` of KV (its prompt plus its
        whole response budget), entered as the engine its turns call: every ``generate`` on it
        belongs to this trajectory, admitted once, pinned to one member for all its turns, its
        reservation held across tool waits and released on exit. ``group``: what the caller
        knows of it -- rollouts of one problem share a group (their lengths predict each
        other); None is a group of its own."""
        ...


async def run_trajectory(engine: Engine, need_tokens: int,
                         body: Callable[[Engine], Awaitable[Result]],
                         group: Hashable = None) -> Result:
    """Run ``body(turn_engine)`` -- every turn of one trajectory, each a ``generate`` on
    ``turn_engine`` -- as one unit of scheduling.

    On a ``TrajectoryScheduler`` (``rstar2.fleet.Fleet``) ``turn_engine`` is the trajectory's
    own view of it (``engine.trajectory(need_tokens, group)``): the trajectory and its group
    are passed, never guessed. If the member holding it dies the body raises
    ``TrajectoryLost`` and is run again from its start, so a caller gets exactly one result
    per trajectory. Other engines run ``body(engine)``.
    """
    if not isinstance(engine, TrajectoryScheduler):
        return await body(engine)
    while True:
        try:
            async with engine.trajectory(need_tokens, group) as turn_engine:
                return await body(turn_engine)
        except TrajectoryLost:
            continue
