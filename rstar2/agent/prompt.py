"""The rStar2-Agent prompt (paper Fig. 3) rendered with the model's own chat template.

* system: how to lay out an answer (``<reason>``/``<answer>`` tags) and, in the ``rstar2``
  variant, the ``# Tools`` block with the JSON schema of each offered tool, one per line (the
  Python tool alone by default, as in the paper); the ``short`` variant says the same in a few
  lines, a sentence per tool beyond Python (~100 tokens instead of ~450, for CPU training, where
  every prompt token is paid again in each forward and backward pass);
* user: the answer-format instruction and the problem (the problem alone in ``short``);
* generation prefix: ``<reason>``, appended after the template's assistant header, so every
  assistant turn starts reasoning (it is forced, not sampled).

``ChatFormat`` turns these into token ids once per rollout and produces the token ids of the
turn that carries tool responses back (a ``user`` turn of ``<tool_response>`` blocks followed by
the next assistant header and ``<reason>``), derived from the same chat template so that
ChatML models (Qwen, SmolLM2) and any other template get their own separators.

Thinking is off: a template with a thinking switch (Qwen3's ``enable_thinking``) is rendered with
it off, so every assistant turn starts after the template's empty ``<think>\n\n</think>\n\n``
and reasons inside ``<reason>`` -- the report's non-reasoning format (§4.1). Such templates
also render an earlier assistant turn differently once a user turn follows (they drop its
reasoning block); only the text *after* an assistant message is taken from the template, and a
conversation is never re-rendered, so each turn keeps the tokens it was sampled with.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from rstar2.section import Section

from rstar2.agent.tools.python import PYTHON_TOOL_NAME, python_schema

GENERATION_PREFIX = "<reason>"
DEFAULT_TOOL_NAME = PYTHON_TOOL_NAME

ANSWER_FORMAT = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant "
    "solves it. The Assistant first thinks about the reasoning process in the mind and then "
    "provides the User with the answer. The reasoning process is enclosed within <reason> "
    "</reason> and the answer is enclosed within <answer> </answer> tags, respectively, i.e., "
    "<reason> reasoning process here </reason> <answer> answer here </answer>."
)

TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)

TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

SHORT_SYSTEM = (
    "Solve the problem. Think inside <reason> </reason>, then give the final answer as "
    "<answer>\\boxed{{N}}</answer>. To run Python, write <tool_call>{{\"name\": \"{tool}\", "
    "\"arguments\": {{\"code\": \"...\", \"input\": \"\"}}}}</tool_call>; what the program "
    "prints comes back in <tool_response> </tool_response>."
)

USER_INSTRUCTION = (
    "You must put your answer inside <answer> </answer> tags, i.e., <answer> answer here "
    "</answer>. And your final answer will be extracted automatically by the \\boxed{} tag.\n"
    "This is the problem:\n"
)


class PromptConfig(Section):
    """Which prompt the agent sees."""

    variant: Literal["rstar2", "short", "no_tools"] = Field(
        "rstar2", description="'rstar2': the paper's prompt with the Python tool; 'short': the "
        "same tags and tool in a few lines, the problem without the answer-format preamble (the "
        "CPU demo); 'no_tools': the paper's answer format without the tool block (a tool-free "
        "baseline).")
    tool_name: str = Field(DEFAULT_TOOL_NAME, description="Name the model calls the Python "
                           "tool by (the released code uses 'python_code_with_standard_io').")

    @property
    def tools_enabled(self) -> bool:
        return self.variant != "no_tools"


def tool_schema(tool_name: str = DEFAULT_TOOL_NAME) -> dict:
    """The JSON function schema of the Python tool, as listed in the system prompt."""
    return python_schema(tool_name)


def system_prompt(config: PromptConfig, schemas: Sequence[dict] | None = None) -> str:
    """The system message offering the tools of ``schemas`` (default: the Python tool alone)."""
    schemas = [tool_schema(config.tool_name)] if schemas is None else list(schemas)
    if config.variant == "short":
        return short_system(config.tool_name, schemas)
    if not config.tools_enabled or not schemas:
        return ANSWER_FORMAT
    listed = "\n".join(json.dumps(schema) for schema in schemas)
    return f"{ANSWER_FORMAT}\n\n{TOOLS_HEADER}{listed}{TOOLS_FOOTER}"


def short_system(python_name: str, schemas: Sequence[dict]) -> str:
    """The short prompt: the Python tool's line when it is offered, then a line per other tool
    with its description and an example call."""
    functions = [schema["function"] for schema in schemas]
    with_python = any(function["name"] == python_name for function in functions)
    text = SHORT_SYSTEM.format(tool=python_name)
    if not with_python:
        text = text.split(" To run Python")[0]
    for function in functions:
        if function["name"] != python_name:
            example = {name: "..." for name in function.get("parameters", {}).get("properties", {})}
            call = json.dumps({"name": function["name"], "arguments": example})
            text += f" The {function['name']} tool: {function['description']} Call it as <tool_call>{call}</tool_call>."
    if functions and not with_python:
        text += " The answer comes back in <tool_response> </tool_response>."
    return text


def user_message(question: str) -> str:
    return USER_INSTRUCTION + question


def tool_responses_text(outputs: list[str]) -> str:
    """The content of the user turn that carries a turn's tool outputs back."""
    return "\n".join(f"<tool_response>\n{out}\n</tool_response>" for out in outputs)


class ChatFormat:
    """Token ids of prompts and tool-response turns for one tokenizer's chat template."""

    SENTINEL = "\x00rstar2-sentinel\x00"

    def __init__(self, tokenizer, config: PromptConfig | None = None, tool_schemas: Sequence[dict] | None = None):
        self.tokenizer = tokenizer
        self.config = config or PromptConfig()
        self.system = system_prompt(self.config, tool_schemas)
        self.end_of_turn, self.user_turn_before, self.user_turn_after = self.turn_pieces()
        self.end_of_turn_id = self.encode(self.end_of_turn)[0] if self.end_of_turn else None

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, enable_thinking=False)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def turn_pieces(self) -> tuple[str, str, str]:
        """What the template writes after an assistant message's content (its end-of-turn
        text), and around a following user message up to the next assistant header."""
        head = [{"role": "system", "content": self.system}, {"role": "user", "content": "q"}]
        closed = self.render(head + [{"role": "assistant", "content": self.SENTINEL}], False)
        extended = self.render(head + [{"role": "assistant", "content": self.SENTINEL},
                                       {"role": "user", "content": self.SENTINEL}], True)
        end_of_turn = closed.split(self.SENTINEL, 1)[1]
        pieces = extended.split(self.SENTINEL)
        if len(pieces) != 3 or not pieces[1].startswith(end_of_turn):
            raise ValueError("the chat template does not write an assistant turn's end and the "
                             "next user turn after its content; tool turns cannot be appended")
        return end_of_turn, pieces[1][len(end_of_turn):], pieces[2]

    def prompt_text(self, question: str) -> str:
        user = question if self.config.variant == "short" else user_message(question)
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": user}]
        return self.render(messages, True) + GENERATION_PREFIX

    def prompt_ids(self, question: str) -> list[int]:
        return self.encode(self.prompt_text(question))

    def tool_turn_text(self, outputs: list[str], turn_ended: bool) -> str:
        """Text from the end of an assistant turn to the start of the next one's reasoning.

        ``turn_ended``: the assistant's last sampled token was the template's end-of-turn
        token; otherwise (stopped by a stop string) the end-of-turn text is added here.
        """
        return self.user_turn_text(tool_responses_text(outputs), turn_ended)

    def user_turn_text(self, content: str, turn_ended: bool = True) -> str:
        """A user turn of ``content`` after an assistant turn, up to the next ``<reason>``
        (``tool_turn_text``'s layout; a conversation's follow-up question uses it as is)."""
        closing = self.end_of_turn
        if turn_ended and self.end_of_turn_id is not None:
            closing = closing[len(self.tokenizer.decode([self.end_of_turn_id])):]
        return closing + self.user_turn_before + content + self.user_turn_after + GENERATION_PREFIX

    def tool_turn_ids(self, outputs: list[str], last_token: int) -> list[int]:
        return self.encode(self.tool_turn_text(outputs, last_token == self.end_of_turn_id))
