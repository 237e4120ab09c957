"""The paper's tool, and the default one: run a Python program in the isolated sandbox.

    tool = PythonTool(sandbox_client, timeout_s=4.0)
    result = await tool.call({"code": "print(17 * 23)", "input": ""})   # ToolResult("391", "ok", ...)

The schema is the report's, word for word (its ``input`` listed as required, as the model saw
it), but a call without ``input`` runs with empty standard input, as the release's parser
allows. The response is ``toolcall.tool_output`` of the sandbox's answer (stdout, or the last
expression's value, or the traceback, or a timeout notice) with its status; an unreachable
sandbox raises ``SandboxUnavailable`` out of the loop (``ToolUnavailable``'s rule).
"""

from __future__ import annotations

from typing import Any, Protocol

from rstar2.agent.toolcall import tool_output
from rstar2.agent.tools.base import ArgumentError, ToolResult, function_schema
from rstar2.sandbox.protocol import RunResult

PYTHON_TOOL_NAME = "execute_python_code_with_standard_io"
DESCRIPTION = (
    "Execute a Python program and return what it prints. The program runs as a fresh script; "
    "`input` is fed to its standard input. If the program prints nothing, the value of its last "
    "expression is shown. If an exception is raised, the error message and traceback are "
    "returned instead; programs that run past the time limit are stopped."
)


class CodeRunner(Protocol):
    """What the Python tool needs from the sandbox (``rstar2.sandbox.SandboxClient`` is one)."""

    async def run(self, code: str, stdin: str = "", timeout_s: float | None = None) -> RunResult: ...


def python_schema(name: str = PYTHON_TOOL_NAME) -> dict:
    """The JSON function schema of the Python tool, as listed in the paper's system prompt."""
    return function_schema(name, DESCRIPTION, {
        "code": {"type": "string", "description": "The Python code to execute. Print what you need to see."},
        "input": {"type": "string", "description": "Text given to the program on standard input "
                  "(empty string if the program reads nothing)."},
    })


class PythonTool:
    """Runs each call's ``code`` with its ``input`` on ``runner`` within ``timeout_s``."""

    self_timed = True
    """The sandbox enforces the limit from the moment the program starts, so a call waiting
    for a free worker is not cut short by a clock that started earlier."""

    def __init__(self, runner: CodeRunner, timeout_s: float | None = None, name: str = PYTHON_TOOL_NAME):
        self.runner = runner
        self.timeout_s = timeout_s
        self.name = name
        self.schema = python_schema(name)

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        code, stdin = program_of(arguments)
        result = await self.runner.run(code, stdin, self.timeout_s)
        return ToolResult(tool_output(result), result.status, result.duration_s)


def program_of(arguments: dict[str, Any]) -> tuple[str, str]:
    """``(code, stdin)`` of a call, or ``ArgumentError`` with what the model must fix."""
    code, stdin = arguments.get("code"), arguments.get("input") or ""
    if not isinstance(code, str) or not code.strip():
        raise ArgumentError('Error: the tool call is missing the "code" argument (a string of Python source).')
    if not isinstance(stdin, str):
        raise ArgumentError('Error: the "input" argument must be a string.')
    return code, stdin
