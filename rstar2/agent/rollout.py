"""The multi-turn, tool-using rollout (paper section 2.1), token-in/token-out.

Per question: tokenise the prompt once; then per assistant turn, generate from the exact
token ids so far, keep the sampled ids and their log-probs (mask 1), parse the turn's tool
calls, run them in the sandbox, and append the tool-response turn's ids (mask 0). A turn
without a tool call ends the rollout; so do the turn limit and the response token budget
(then the trajectory is marked truncated). Tool responses longer than
``max_tool_response_tokens`` are cut (``tool_response_cut``) around a marker, and calls beyond
``max_tool_calls_per_turn`` in one turn are answered with an error instead of run: every limit
is a field of ``RolloutConfig``, the recipe's ``rollout:`` section.

Concurrency: ``Agent.rollouts`` runs every rollout as its own coroutine. Each one awaits the
engine for its turns and the sandbox for its tool calls independently, so there is no barrier
per turn across the batch; the engine batches whatever generation requests are pending (see
``engines.hf``) and the sandbox client batches whatever calls are pending.

Tools: the agent offers the tools of ``RolloutConfig.tools`` (``rstar2.agent.tools``: the
Python sandbox by default), lists them in the prompt and calls them through one ``ToolSet``;
whatever a call does becomes its tool response and its record (status, error flag), except a
tool whose service is gone: ``SandboxUnavailable`` and ``ToolUnavailable`` propagate, so an
unreachable sandbox never becomes a tool response.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any, Hashable, Literal

from pydantic import Field, field_validator

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.agent.toolcall import ParseError, ToolCall, clip_tokens, parse_tool_calls
from rstar2.agent.tools import CodeRunner, PythonTool, ToolContext, ToolSet, ToolSpec, open_tools
from rstar2.agent.trajectory import ToolCallRecord, Trajectory, Turn, last_answer
from rstar2.engines.base import Completion, Engine, SamplerFloat, SamplingParams, run_trajectory
from rstar2.engines.seeds import derive_seed
from rstar2.section import Section


class RolloutConfig(Section):
    """The limits and sampling of one rollout: a run's ``rollout:`` section, handed to the agent
    as it is (also what ``rstar2 eval`` and ``chat`` build from their options)."""

    prompt: PromptConfig = PromptConfig()
    """The agent's prompt (``rstar2.agent.prompt``): ``variant`` 'rstar2' (the paper's), 'short'
    (the same tags and tool in a few lines, the CPU demo's) or 'no_tools', and the tool's
    ``tool_name``. A bare variant (``prompt: short``) is read as ``{variant: short}``."""
    temperature: SamplerFloat = Field(1.0, ge=0.0)
    """Sampling temperature (paper: 1.0 in training; 0 is greedy, for evaluation only)."""
    top_p: SamplerFloat = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass (1 = off; the paper does not state one)."""
    max_response_tokens: int = Field(8192, ge=1)
    """Budget of all tokens after the prompt, tool responses included (paper: 8192 in stage 1,
    12288 in stages 2-3); a rollout that reaches it is truncated, and in training keeps reward
    0 (no overlong filtering, §2.5)."""
    max_turns: int = Field(10, ge=1)
    """Most assistant turns (paper: 10 in RL stages 1-2, 15 in stage 3, 30 at evaluation)."""
    max_tool_calls_per_turn: int = Field(4, ge=1)
    """Tool calls run per assistant turn; calls beyond this are answered with an error
    instead of run (each still counts as a call, and as a failed one)."""
    max_tool_response_tokens: int = Field(512, ge=16)
    """Longest tool output sent back to the model, in tokens; a longer one is cut around a
    marker saying how many tokens were left out (the release: verl's truncation)."""
    tool_response_cut: Literal["middle", "end", "start"] = "middle"
    """Which part of a long tool output is cut: 'middle' keeps its head and tail (where errors
    and final results usually are; verl's 'middle'), 'end' keeps the head, 'start' the tail."""
    tools: tuple[ToolSpec, ...] = (ToolSpec(use="python"),)
    """The tools the agent offers and the prompt lists (docs/tools.md): 'python' (the sandbox,
    the paper's only tool), 'calculator', or your own as ``{use: package.module:factory,
    options: {...}}``; a bare name is ``{use: name}``."""
    tool_timeout_s: float | None = Field(4.0, gt=0)
    """Wall-clock limit of one tool call (release: 4 s); null leaves it to the sandbox
    service's own default (``rstar2 sandbox serve --timeout-s``)."""

    @field_validator("prompt", mode="before")
    @classmethod
    def variant_alone(cls, value: Any) -> Any:
        """``prompt: short`` is the variant alone, with the default tool name."""
        return {"variant": value} if isinstance(value, str) else value



class ResponseBuilder:
    """The growing response of one rollout: ids, mask, log-probs and turn boundaries."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.turns: list[Turn] = []
        self.versions: list[int] = []  # the weights each token was sampled under; -1: not sampled

    def append(self, ids: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
        """Forced tokens (tool responses, template text): no log-probs, no version."""
        self.ids.extend(ids)
        self.mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))
        self.versions.extend([-1] * len(ids))

    def sampled(self, completion: Completion) -> None:
        """The tokens of ``completion``, with their log-probs and the weights they came from."""
        n = len(completion.token_ids)
        self.ids.extend(completion.token_ids)
        self.mask.extend([1] * n)
        self.logprobs.extend(completion.logprobs)
        version = -1 if completion.weight_version is None else completion.weight_version
        self.versions.extend(completion.token_versions or [version] * n)

    def weight_version(self) -> int | None:
        """The oldest weights any token was sampled under."""
        return min((v for v in self.versions if v >= 0), default=None)

    def token_versions(self) -> list[int] | None:
        """Each token's version where the sampled ones differ (``Trajectory.token_versions``)."""
        return list(self.versions) if len({v for v in self.versions if v >= 0}) > 1 else None

    def close_turn(self, role: str) -> str:
        """End the current turn (everything since the last one) and return its text."""
        start = self.turns[-1].end if self.turns else 0
        text = self.tokenizer.decode(self.ids[start:])
        self.turns.append(Turn(role=role, text=text, start=start, end=len(self.ids)))
        return text


class Agent:
    """Runs rollouts of questions with one engine, one tokenizer and one code runner."""

    def __init__(self, engine: Engine, tokenizer, runner: CodeRunner | None,
                 config: RolloutConfig | None = None, tools: ToolSet | None = None):
        """``runner``: the sandbox the Python tool runs on (None where it is not offered);
        ``tools``: tools built elsewhere, instead of those ``config.tools`` names."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.config = config or RolloutConfig()
        if tools is None and self.config.prompt.tools_enabled:
            context = ToolContext(runner, self.config.tool_timeout_s, self.config.prompt.tool_name)
            tools = open_tools(self.config.tools, context)
        self.tools = tools if tools is not None else ToolSet([])
        self.chat = ChatFormat(tokenizer, self.config.prompt, self.tools.schemas)

    async def rollouts(self, questions: Sequence[str]) -> list[Trajectory]:
        """Rollouts of all ``questions``, concurrently."""
        return list(await asyncio.gather(*(self.rollout(q) for q in questions)))

    async def rollout(self, question: str, forced_prefix: str = "", seed: int | None = None,
                      group: Hashable = None) -> Trajectory:
        """One rollout of ``question``.

        ``seed``: the trajectory's own random stream (each turn samples with a seed derived from
        it and the turn's number), so it samples the same tokens however the engine batches it;
        None draws from the engine's generator.

        ``forced_prefix``: text the first assistant turn starts with, teacher-forced (mask 0),
        e.g. a tool call to exercise the tool path with a model that rarely calls tools. If it
        ends with the template's end-of-turn token it is the whole first turn and the model
        takes over after the tool response.

        On an engine that schedules whole trajectories (a fleet) all turns run as one
        trajectory needing the prompt plus the response budget in KV (``run_trajectory``), in
        ``group``: rollouts of one problem share one (the sampler passes the problem's id).
        """
        prompt_text = self.chat.prompt_text(question)
        prompt_ids = self.chat.encode(prompt_text)
        need = len(prompt_ids) + self.config.max_response_tokens
        return await run_trajectory(self.engine, need, lambda engine: self.turns(
            engine, prompt_text, prompt_ids, forced_prefix, seed), group)

    async def turns(self, engine: Engine, prompt_text: str, prompt_ids: list[int],
                    forced_prefix: str, seed: int | None = None) -> Trajectory:
        """The turns of one rollout, from the first to the stop, each sampled on ``engine``."""
        cfg = self.config
        response = ResponseBuilder(self.tokenizer)
        calls: list[ToolCallRecord] = []
        forced = self.chat.encode(forced_prefix) if forced_prefix else []
        response.append(forced)
        scripted = bool(forced) and forced[-1] == self.chat.end_of_turn_id
        for turn in range(cfg.max_turns):
            turn_seed = None if seed is None else derive_seed(seed, turn)
            complete = (scripted and turn == 0) or await self.generate_turn(
                engine, prompt_ids, response, turn_seed)
            text = response.close_turn("assistant")
            if not complete:
                stop = "max_tokens"
                break
            parsed = parse_tool_calls(text, self.tools.names) if len(self.tools) else []
            if not parsed:
                stop = "answer" if last_answer(text) is not None else "no_tool_call"
                break
            if turn + 1 == cfg.max_turns:
                stop = "max_turns"
                break
            records = await self.execute(parsed, turn)
            calls.extend(records)
            tool_ids = self.chat.tool_turn_ids([r.output for r in records], response.ids[-1])
            if len(response.ids) + len(tool_ids) >= cfg.max_response_tokens:
                stop = "max_tokens"
                break
            response.append(tool_ids)
            response.close_turn("tool")
        assistant = [t for t in response.turns if t.role == "assistant"]
        return Trajectory(
            prompt_ids=prompt_ids, prompt_text=prompt_text, response_ids=response.ids,
            loss_mask=response.mask, logprobs=response.logprobs, turns=response.turns,
            tool_calls=calls, num_assistant_turns=len(assistant),
            final_answer=last_answer("".join(t.text for t in assistant)),
            stop_reason=stop, temperature=cfg.temperature,
            weight_version=response.weight_version(), token_versions=response.token_versions(),
        )

    async def generate_turn(self, engine: Engine, prompt_ids: list[int],
                            response: ResponseBuilder, seed: int | None = None) -> bool:
        """Sample the rest of the current assistant turn from the exact ids so far (with the
        turn's ``seed``); False when the response budget ran out first. A completion the engine
        aborted (new weights arriving, ``PausableEngine``) is continued from where it stopped,
        as a new request with a seed of its own."""
        cfg = self.config
        for part in itertools.count():
            budget = cfg.max_response_tokens - len(response.ids)
            if budget <= 0:
                return False
            part_seed = seed if seed is None or part == 0 else derive_seed(seed, part)
            params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=budget,
                                    seed=part_seed)
            completion = (await engine.generate([prompt_ids + response.ids], params))[0]
            response.sampled(completion)
            if completion.finish_reason != "abort":
                return completion.finish_reason != "length"

    async def execute(self, parsed: list[ToolCall | ParseError], turn: int
                      ) -> list[ToolCallRecord]:
        """Run a turn's calls concurrently; every call gets a record, errors included."""
        limit = self.config.max_tool_calls_per_turn
        message = f"Error: at most {limit} tool calls are run per turn; this one was not run."
        parsed = parsed[:limit] + [ParseError(message, p.raw) for p in parsed[limit:]]
        return list(await asyncio.gather(*(self.call(p, turn) for p in parsed)))

    async def call(self, parsed: ToolCall | ParseError, turn: int) -> ToolCallRecord:
        if isinstance(parsed, ParseError):
            return ToolCallRecord(turn=turn, code=None, raw=parsed.raw, status="parse_error",
                                  output=parsed.message, error=True)
        result = await self.tools.run(parsed.name, parsed.arguments)
        output = clip_tokens(result.text, self.tokenizer, self.config.max_tool_response_tokens,
                             self.config.tool_response_cut)
        code, stdin = parsed.arguments.get("code"), parsed.arguments.get("input")
        ran_python = isinstance(self.tools.tools[parsed.name], PythonTool) and result.status != "parse_error"
        return ToolCallRecord(turn=turn, tool=parsed.name, arguments=parsed.arguments,
                              code=code if ran_python else None, stdin=stdin if ran_python and stdin else "",
                              raw=parsed.raw, status=result.status, output=output, error=not result.ok,
                              duration_s=result.duration_s)
