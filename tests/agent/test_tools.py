"""The tool protocol and registry: tools named in a recipe are built once, and whatever a call
does -- bad arguments, an exception, no answer -- comes back as the tool's response; only a
tool whose service is gone stops the run."""

from __future__ import annotations

import asyncio
import json

import pytest

from rstar2.agent.tools import (PythonTool, ToolConfigError, ToolContext, ToolSet, ToolSpec, ToolUnavailable,
                                open_tools)
from rstar2.sandbox import SandboxClient

HERE = "tests.agent.example_tools"


def run(tools: ToolSet, name: str, arguments: dict):
    return asyncio.run(tools.run(name, arguments))


def tools_of(*specs, **context) -> ToolSet:
    return open_tools([ToolSpec.model_validate(spec) for spec in specs], ToolContext(**context))


@pytest.mark.parametrize("expression, shown", [
    ("(17 + 5) * 3 / 4", "16.5"), ("2 ** 100", str(2 ** 100)), ("2^10", "1024"), ("7 // 2 + 7 % 2", "4"),
    ("sqrt(16) + factorial(5)", "124"), ("1/3", "0.333333333333"), ("-pi", "-3.14159265359"),
    ("comb(10, 3)", "120"), ("round(2.675, 2)", "2.67"),
])
def test_the_calculator_evaluates_arithmetic(expression, shown):
    assert run(tools_of("calculator"), "calculator", {"expression": expression}).text == shown


@pytest.mark.parametrize("expression, said", [
    ("1/0", "division by zero"), ("9 ** 99999", "more than 4000 digits"), ("factorial(5000)", "more than 4000 digits"),
    ("__import__('os').system('ls')", "is not a number, an operation"), ("x + 1", "is not a number"),
    ("(1 +", "not an arithmetic expression"), ("sqrt(-1)", "math domain error"), ("1" * 1001, "longer than"),
])
def test_the_calculator_answers_what_it_cannot_do_as_an_error(expression, said):
    result = run(tools_of("calculator"), "calculator", {"expression": expression})
    assert result.status == "error" and result.text.startswith("Error: ") and said in result.text


def test_arguments_that_do_not_fit_the_schema_are_parse_errors():
    tools = tools_of("calculator")
    for arguments, said in (({}, 'missing the "expression" argument (a string'),
                            ({"expression": 3}, '"expression" argument must be a string'),
                            ({"expression": "1", "precision": 2}, 'unknown argument "precision"')):
        result = run(tools, "calculator", arguments)
        assert result.status == "parse_error" and said in result.text


def test_a_users_tool_from_a_module_with_options(tmp_path):
    (tmp_path / "constants.json").write_text(json.dumps({"avogadro": 6.02214076e23, "answer": 42}))
    tools = tools_of("calculator", {"use": f"{HERE}:Lookup", "options": {"path": str(tmp_path / "constants.json")}})
    assert tools.names == ["calculator", "lookup"]
    assert [schema["function"]["name"] for schema in tools.schemas] == ["calculator", "lookup"]
    assert run(tools, "lookup", {"key": "answer"}).text == "42"
    missing = run(tools, "lookup", {"key": "pi"})
    assert missing.status == "error" and missing.text == "Error: no constant 'pi'; the constants are avogadro, answer."


def test_a_failing_or_silent_tool_answers_and_a_gone_one_stops_the_run():
    tools = tools_of(f"{HERE}:Broken", f"{HERE}:Slow", f"{HERE}:Gone", timeout_s=0.2)
    assert tools.tools["broken"].context.timeout_s == 0.2  # the factory asked for the context
    broken = run(tools, "broken", {})
    assert broken.status == "error" and broken.text == "Error: KeyError: 'missing'"
    slow = run(tools, "slow", {})
    assert slow.status == "timeout" and "within 0.2 s" in slow.text
    with pytest.raises(ToolUnavailable):
        run(tools, "gone", {})


@pytest.mark.parametrize("spec, said", [
    ("search", "unknown tool 'search': use one of python, calculator"),
    (f"{HERE}:Missing", "has no 'Missing'"),
    ("tests.agent.nowhere:Tool", "cannot import tests.agent.nowhere"),
    ({"use": f"{HERE}:Lookup", "options": {"path": "/nonexistent.json"}}, "FileNotFoundError"),
    (f"{HERE}:not_a_tool", "returned str, not a tool"),
    (f"{HERE}:NotAsync", "call must be async"),
    ("python", "needs a sandbox"),
])
def test_a_tool_list_that_cannot_be_built_is_one_line(spec, said):
    with pytest.raises(ToolConfigError) as caught:
        tools_of(spec)
    assert said in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ToolConfigError, match="two tools are named 'calculator'"):
        tools_of("calculator", "calculator")


def test_the_python_tool_runs_on_the_sandbox(sandbox_url):
    async def calls():
        async with SandboxClient([sandbox_url]) as sandbox:
            tools = open_tools([ToolSpec(use="python")], ToolContext(runner=sandbox, timeout_s=4.0))
            assert isinstance(tools.tools[tools.names[0]], PythonTool)
            name = tools.names[0]
            return [await tools.run(name, arguments) for arguments in (
                {"code": "print(int(input()) * 2)", "input": "21"}, {"code": "1/0"}, {"input": "1"})]

    ok, failed, malformed = asyncio.run(calls())
    assert (ok.text, ok.status) == ("42", "ok") and ok.duration_s > 0
    assert failed.status == "error" and "ZeroDivisionError" in failed.text
    assert malformed.status == "parse_error" and 'missing the "code" argument' in malformed.text
