"""SFT data: multi-turn tool-use conversations in chat-format JSONL, and their token sequences.

One conversation per line (docs/sft.md has the whole format):

    {"id": "t1", "messages": [
      {"role": "user", "content": "What is 12345 * 6789?"},
      {"role": "assistant", "content": "<reason>Exact products need a program.</reason>\\n<tool_call>\\n{\\"name\\": \\"execute_python_code_with_standard_io\\", \\"arguments\\": {\\"code\\": \\"print(12345 * 6789)\\", \\"input\\": \\"\\"}}\\n</tool_call>"},
      {"role": "tool", "content": "83810205"},
      {"role": "assistant", "content": "<reason>The program printed 83810205.</reason>\\n<answer>\\\\boxed{83810205}</answer>"}]}

* ``system`` (optional, first): used verbatim. Without one the conversation is asked the way
  the recipe's prompt says (``ChatFormat.prompt_text``: the paper's system prompt and answer
  instruction around the first user message, or the short variant), so one file serves any
  prompt;
* ``user``: the first is the question; a later one is a follow-up turn, used verbatim;
* ``assistant``: starts with ``<reason>`` (every turn of the agent does; that tag is forced, not
  learned); its tool calls are text in the paper's ``<tool_call>`` format;
* ``tool``: the output of one call; consecutive ones answer the calls of the turn before them
  (the agent's ``<tool_response>`` blocks, in one user turn);
* the conversation ends with an assistant message.

``conversation_sequence`` lays a conversation out exactly as the agent's rollout would have
(``rstar2.agent.rollout``): the prompt's ids, then for each assistant turn its text after
``<reason>`` and the template's end-of-turn token (loss mask 1), then the tool or user turn up
to the next ``<reason>`` (mask 0), each piece tokenised on its own as the agent does. So SFT
trains on the tokens RL will sample, and a trace the agent produced (``trajectory_messages``)
comes back as its very ids. ``read_conversations`` checks every row before any is used and
reports the bad ones with their line numbers in one ``DataError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rstar2.agent.prompt import GENERATION_PREFIX, ChatFormat
from rstar2.agent.trajectory import Trajectory
from rstar2.data.jsonl import DataError, read_jsonl
from rstar2.data.problems import bad_rows_message
from rstar2.training.batch import TrainSequence

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Conversation:
    """One row of an SFT file."""

    id: str
    messages: list[dict]
    line: int = 0


def read_conversations(path: str | Path) -> list[Conversation]:
    """Every conversation of ``path``; ``DataError`` listing each malformed row by line."""
    path = Path(path)
    conversations, errors = [], []
    for line, row in read_jsonl(path):
        try:
            conversations.append(Conversation(row_id(row, f"{path.stem}-{line}"), checked_messages(row), line))
        except DataError as error:
            errors.append(f"line {line}: {error}")
    if errors:
        raise DataError(bad_rows_message(path, errors))
    if not conversations:
        raise DataError(f"{path}: no conversations (the file is empty)")
    return conversations


def row_id(row: dict, default: str) -> str:
    value = row.get("id", default)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"'id' must be a string or an integer, got {value!r}")
    return str(value)


def checked_messages(row: dict) -> list[dict]:
    """The row's messages once they follow the module docstring's rules."""
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DataError("needs 'messages', a non-empty list of {role, content} objects")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise DataError(f"message {index}: needs a 'role' of {', '.join(ROLES)}")
        if not isinstance(message.get("content"), str):
            raise DataError(f"message {index} ({message['role']}): 'content' must be a string")
    body = messages[1:] if messages[0]["role"] == "system" else messages
    if not body or body[0]["role"] != "user":
        raise DataError("the first message after an optional system message must be 'user'")
    for index, (before, message) in enumerate(zip(body, body[1:]), start=len(messages) - len(body) + 1):
        check_order(before["role"], message, index)
    if body[-1]["role"] != "assistant":
        raise DataError("the last message must be 'assistant' (what the model learns to write)")
    return messages


def check_order(previous: str, message: dict, index: int) -> None:
    role = message["role"]
    allowed = {"user": ("assistant",), "assistant": ("tool", "user"), "tool": ("tool", "assistant")}[previous]
    if role not in allowed:
        raise DataError(f"message {index} ({role}) cannot follow a '{previous}' message")
    if role == "assistant" and not message["content"].startswith(GENERATION_PREFIX):
        raise DataError(f"message {index} (assistant) must start with {GENERATION_PREFIX} "
                        "(every assistant turn of the agent does)")


def conversation_sequence(messages: Sequence[dict], chat: ChatFormat) -> TrainSequence:
    """The token ids and loss mask of a checked conversation (module docstring)."""
    if messages[0]["role"] == "system":
        prompt = chat.render(list(messages[:2]), True) + GENERATION_PREFIX
        rest = messages[2:]
    else:
        prompt, rest = chat.prompt_text(messages[0]["content"]), messages[1:]
    ids: list[int] = []
    mask: list[int] = []
    pending_tools: list[str] = []
    for message in rest:
        if message["role"] == "tool":
            pending_tools.append(message["content"])
            continue
        if message["role"] == "user":
            append(ids, mask, chat.encode(chat.user_turn_text(message["content"])), 0)
        elif pending_tools:
            append(ids, mask, chat.encode(chat.tool_turn_text(pending_tools, turn_ended=True)), 0)
            pending_tools = []
        if message["role"] == "assistant":
            text = message["content"][len(GENERATION_PREFIX):]
            append(ids, mask, chat.encode(text) + [chat.end_of_turn_id], 1)
    return TrainSequence(chat.encode(prompt), ids, mask, [0.0] * len(ids))


def append(ids: list[int], mask: list[int], new: list[int], value: int) -> None:
    ids.extend(new)
    mask.extend([value] * len(new))


def trajectory_messages(question: str, trajectory: Trajectory, end_of_turn: str) -> list[dict]:
    """A finished agent trajectory as a conversation (the question as its user message): the
    form the demo and the GSM8K pipeline write their traces in."""
    messages = [{"role": "user", "content": question}]
    calls = iter(trajectory.tool_calls)
    for turn in trajectory.turns:
        if turn.role == "assistant":
            text = turn.text.removesuffix(end_of_turn.strip())
            messages.append({"role": "assistant", "content": GENERATION_PREFIX + text})
        else:
            count = turn.text.count("<tool_response>")
            messages += [{"role": "tool", "content": next(calls).output} for _ in range(count)]
    return messages
