"""The record of one rollout, as later stages (reward, RoC, the loss, the viewer) read it.

Invariants, checked by the tests:

* ``response_ids``, ``loss_mask`` and ``logprobs`` have the same length; ``loss_mask`` is 1
  exactly where the model sampled the token, and ``logprobs`` is 0 wherever the mask is 0;
* ``turns`` tile ``response_ids`` in order, and ``prompt_text`` plus the turns' texts is the
  decoding of ``prompt_ids + response_ids``;
* the ids are the ones the model saw: nothing was re-tokenised after sampling.

Pydantic models, so ``model_dump_json()`` / ``Trajectory.model_validate_json()`` round-trip.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

ToolStatus = Literal["ok", "error", "timeout", "killed", "parse_error"]
StopReason = Literal["answer", "no_tool_call", "max_turns", "max_tokens"]
ANSWER_PATTERN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class ToolCallRecord(BaseModel):
    """One tool call and what came of it."""

    turn: int = Field(description="Index of the assistant turn that made the call (from 0).")
    tool: str | None = Field(None, description="Name of the tool called; None if the call did not parse.")
    arguments: dict | None = Field(None, description="The call's arguments as the model wrote them; "
                                   "None if the call did not parse.")
    code: str | None = Field(description="Python source that ran (Python tool calls only); None "
                             "for other tools and calls that did not parse.")
    stdin: str = Field("", description="Text fed to the program's standard input (Python tool).")
    raw: str = Field(description="The model's text between <tool_call> and </tool_call>.")
    status: ToolStatus = Field(description="The call's outcome (ok | error | timeout | killed), or "
                               "parse_error when it could not be executed (bad JSON, an unknown "
                               "tool, arguments that do not fit the tool).")
    output: str = Field(description="The tool response sent back to the model (after clipping).")
    error: bool = Field(description="Counts as a tool error for RoC: parse errors, execution "
                        "errors, timeouts and kills all do, whichever tool made them.")
    duration_s: float = Field(0.0, description="Execution time the tool reported or the agent measured.")


class Turn(BaseModel):
    """A stretch of the response: one assistant turn, or the tool turn after it."""

    role: Literal["assistant", "tool"] = Field(
        description="'assistant': generated (plus any teacher-forced prefix); 'tool': the tool "
        "responses, the chat template's separators and the next '<reason>' (all mask 0).")
    text: str = Field(description="Decoded text of the turn's tokens.")
    start: int = Field(description="Index of the turn's first token in response_ids.")
    end: int = Field(description="Index one past the turn's last token in response_ids.")


class Trajectory(BaseModel):
    """One multi-turn rollout of one question."""

    prompt_ids: list[int] = Field(description="Token ids of the rendered prompt (system, user, "
                                  "assistant header and '<reason>').")
    prompt_text: str = Field(description="The rendered prompt.")
    response_ids: list[int] = Field(description="Every token after the prompt, in order.")
    loss_mask: list[int] = Field(description="1 where the model sampled the token, 0 for tool "
                                 "responses, template separators and forced text.")
    logprobs: list[float] = Field(description="Sampling log-prob of each response token "
                                  "(log softmax(logits / temperature)); 0 where the mask is 0.")
    turns: list[Turn] = Field(description="The response split into assistant and tool turns.")
    tool_calls: list[ToolCallRecord] = Field(description="Every tool call, in order.")
    num_assistant_turns: int = Field(description="Number of assistant turns generated.")
    final_answer: str | None = Field(description="Content of the last <answer>...</answer> "
                                     "block of the assistant's text, if any.")
    stop_reason: StopReason = Field(
        description="'answer': a turn without a tool call that gave an <answer>; "
        "'no_tool_call': a turn without a tool call and without an answer; 'max_turns': the "
        "turn limit was reached while the model still called the tool; 'max_tokens': the "
        "response budget ran out (truncated).")
    temperature: float = Field(description="Sampling temperature the log-probs refer to.")
    weight_version: int | None = Field(
        None, description="The oldest weight version (learner step) any of its turns was "
        "sampled under (engines stamp each completion); None where the engine does not say.")
    token_versions: list[int] | None = Field(
        None, description="Where its tokens were sampled under more than one weight version "
        "(asynchronous training: a turn after a weight push, or one continued across it), the "
        "version of each response token, -1 for tokens not sampled; None where every sampled "
        "token has ``weight_version``.")

    @property
    def truncated(self) -> bool:
        return self.stop_reason == "max_tokens"

    @property
    def num_tool_errors(self) -> int:
        return sum(call.error for call in self.tool_calls)

    @property
    def assistant_text(self) -> str:
        return "".join(t.text for t in self.turns if t.role == "assistant")


def last_answer(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` block in ``text``."""
    found = ANSWER_PATTERN.findall(text)
    return found[-1].strip() if found else None
