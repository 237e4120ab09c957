"""Tool-call parsing never raises, and each malformed call becomes an error the model reads
(argument checks are the tools', tests/agent/test_tools.py)."""

import pytest

from rstar2.agent.toolcall import ParseError, ToolCall, clip_tokens, parse_tool_calls, tool_output
from rstar2.sandbox import RunResult

NAME = "execute_python_code_with_standard_io"


def call(payload: str) -> str:
    return f"<tool_call>\n{payload}\n</tool_call>"


def test_well_formed_calls_in_order():
    text = ("Let me check." + call('{"name": "%s", "arguments": {"code": "print(1)", "input": ""}}'
                                   % NAME)
            + " and " + call('{"name": "%s", "arguments": {"code": "x=input()", "input": "5"}}'
                             % NAME))
    calls = parse_tool_calls(text, [NAME])
    assert calls == [ToolCall(NAME, {"code": "print(1)", "input": ""}, calls[0].raw),
                     ToolCall(NAME, {"code": "x=input()", "input": "5"}, calls[1].raw)]


def test_arguments_as_a_json_string_are_accepted_and_every_offered_tool_is_known():
    [parsed] = parse_tool_calls(call('{"name": "%s", "arguments": "{\\"code\\": \\"1+1\\"}"}' % NAME),
                                [NAME])
    assert parsed == ToolCall(NAME, {"code": "1+1"}, parsed.raw)
    [other] = parse_tool_calls(call('{"name": "calculator", "arguments": {"expression": "2+2"}}'), [NAME, "calculator"])
    assert other == ToolCall("calculator", {"expression": "2+2"}, other.raw)


@pytest.mark.parametrize("payload, message", [
    ('{"name": "%s", "arguments": {"code": "print(1)"' % NAME, "not valid JSON"),
    ('{"name": "search", "arguments": {"query": "x"}}', f"unknown tool 'search'; the only tool is '{NAME}'"),
    ('{"name": "%s", "arguments": [1]}' % NAME, '"arguments" must be a JSON object'),
    ('["not", "an", "object"]', "JSON object"),
])
def test_malformed_calls_become_parse_errors(payload, message):
    [parsed] = parse_tool_calls(call(payload), [NAME])
    assert isinstance(parsed, ParseError) and message in parsed.message
    [several] = parse_tool_calls(call('{"name": "search"}'), [NAME, "calculator"])
    assert f"the tools are '{NAME}', 'calculator'" in several.message


def test_unclosed_call_is_an_error_and_plain_text_has_no_calls():
    [parsed] = parse_tool_calls('ok <tool_call>{"name": "%s"' % NAME, [NAME])
    assert isinstance(parsed, ParseError) and "not closed" in parsed.message
    assert parse_tool_calls("The answer is <answer>\\boxed{4}</answer>", [NAME]) == []


def test_tool_output_for_each_outcome():
    assert tool_output(RunResult(status="ok", stdout="391\n")) == "391"
    assert tool_output(RunResult(status="ok", stdout="", result="391")) == "391"
    assert tool_output(RunResult(status="ok")) == ""
    error = tool_output(RunResult(status="error", stdout="partial\n",
                                  stderr="Traceback (most recent call last):\nZeroDivisionError"))
    assert error == "partial\nTraceback (most recent call last):\nZeroDivisionError"
    assert "Timeout" in tool_output(RunResult(status="timeout"))
    assert "Killed" in tool_output(RunResult(status="killed"))


def test_clip_tokens_keeps_head_and_tail(tokenizer):
    text = " ".join(str(i) for i in range(400))
    clipped = clip_tokens(text, tokenizer, 40)
    assert clipped.startswith("0 1 2") and clipped.endswith("398 399")
    assert "tokens truncated" in clipped
    assert len(tokenizer.encode(clipped)) < 60
    assert clip_tokens("short", tokenizer, 40) == "short"


def test_clip_tokens_cuts_the_side_it_is_told(tokenizer):
    text = " ".join(str(i) for i in range(400))
    dropped = len(tokenizer.encode(text, add_special_tokens=False)) - 40
    head = clip_tokens(text, tokenizer, 40, cut="end")
    assert head.startswith("0 1 2") and head.endswith(f"...({dropped} tokens truncated)...\n")
    tail = clip_tokens(text, tokenizer, 40, cut="start")
    assert tail.startswith(f"\n...({dropped} tokens truncated)...") and tail.endswith("398 399")
    assert f"({dropped} tokens truncated)" in clip_tokens(text, tokenizer, 40, cut="middle")
