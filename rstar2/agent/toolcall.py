"""Tool calls: parsing them out of an assistant turn, and turning their outcomes into text.

Parsing never raises. Every ``<tool_call>...</tool_call>`` block in a turn (and a final
``<tool_call>`` the model never closed) becomes either a ``ToolCall`` of one of the offered
tools or a ``ParseError`` whose message goes back to the model as the tool response -- bad
JSON, an unknown tool name, arguments that are not an object -- and counts as a tool error, as
in the paper's ``rstar2_agent_hermes`` parser. Whether the arguments fit the tool is the
tool's to say (``rstar2.agent.tools``).

``tool_output(result)`` is the Python tool's response for a sandbox ``RunResult``: the program's stdout,
or the last expression's repr when it printed nothing; the error text with its traceback;
or a timeout notice. ``clip_tokens`` shortens long outputs to a token budget with a marker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass

from rstar2.sandbox.protocol import RunResult

CALL_PATTERN = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
OPEN_TAG = "<tool_call>"


@dataclass(frozen=True)
class ToolCall:
    """A well-formed call of an offered tool."""

    name: str
    arguments: dict
    raw: str  # the text between the tags


@dataclass(frozen=True)
class ParseError:
    """A tool-call block that cannot be executed; ``message`` is the tool response."""

    message: str
    raw: str


def parse_tool_calls(text: str, tool_names: Collection[str]) -> list[ToolCall | ParseError]:
    """Every tool-call block of an assistant turn, in order."""
    calls = [parse_one(m.group(1), tool_names) for m in CALL_PATTERN.finditer(text)]
    closed_until = text.rfind("</tool_call>")
    tail = text[closed_until + len("</tool_call>"):] if closed_until >= 0 else text
    if OPEN_TAG in tail:
        raw = tail[tail.index(OPEN_TAG) + len(OPEN_TAG):]
        calls.append(ParseError("Error: the tool call was not closed with </tool_call>.", raw))
    return calls


def parse_one(raw: str, tool_names: Collection[str]) -> ToolCall | ParseError:
    """One block's JSON: ``{"name": <an offered tool>, "arguments": {...}}``."""
    try:
        payload = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ParseError(f"Error: the tool call is not valid JSON ({exc}).", raw)
    if not isinstance(payload, dict):
        return ParseError('Error: the tool call must be a JSON object with "name" and '
                          '"arguments".', raw)
    name = payload.get("name")
    if name not in tool_names:
        offered = ", ".join(repr(offered) for offered in tool_names)
        which = f"the only tool is {offered}" if len(tool_names) == 1 else f"the tools are {offered}"
        return ParseError(f"Error: unknown tool {name!r}; {which}.", raw)
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):  # some models encode the arguments object as a string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return ParseError(f"Error: the tool arguments are not valid JSON ({exc}).", raw)
    if not isinstance(arguments, dict):
        return ParseError('Error: "arguments" must be a JSON object.', raw)
    return ToolCall(name=name, arguments=arguments, raw=raw)


def tool_output(result: RunResult) -> str:
    """The tool response text for one sandbox outcome (see the module docstring)."""
    if result.status == "ok":
        return result.stdout.rstrip("\n") or result.result or ""
    if result.status == "timeout":
        notice = "Timeout: the code did not finish within the time limit and was stopped."
        return joined(result.stdout, notice)
    if result.status == "killed":
        notice = "Killed: the program was terminated (out of memory, or killed by a signal)."
        return joined(result.stdout, result.stderr, notice)
    return joined(result.stdout, result.stderr or "Error: the program exited with an error.")


def joined(*parts: str) -> str:
    return "\n".join(p.rstrip("\n") for p in parts if p)


def clip_tokens(text: str, tokenizer, max_tokens: int, cut: str = "middle") -> str:
    """``text`` cut to about ``max_tokens`` tokens around a marker saying how much was left out:
    ``cut`` 'middle' keeps its head and tail (where errors and final results usually are),
    'end' keeps the head, 'start' the tail."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= max_tokens:
        return text
    head = {"middle": max_tokens // 2, "end": max_tokens, "start": 0}[cut]
    tail = max_tokens - head
    marker = f"\n...({len(ids) - max_tokens} tokens truncated)...\n"
    return tokenizer.decode(ids[:head]) + marker + tokenizer.decode(ids[len(ids) - tail:])
