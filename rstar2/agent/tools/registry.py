"""The tools a run offers: named in the recipe, built once, called by the agent loop.

    tools = open_tools([ToolSpec(use="python"), ToolSpec(use="calculator")], ToolContext(sandbox, 4.0))
    tools.schemas                                   # what the prompt lists
    result = await tools.run("calculator", {"expression": "2 + 2"})    # ToolResult('4', 'ok', ...)

A recipe's ``rollout.tools`` lists ``ToolSpec``s: a registered name (``TOOLS``: ``python``, the
sandbox, the default; ``calculator``) or your own tool as ``package.module:factory``, with
``options`` passed to the factory as keyword arguments (and ``context``, the run's
``ToolContext``, when the factory takes a parameter of that name). A factory is anything that
returns a ``Tool`` (a class is one). Everything that can be wrong with a list -- an unknown
name, a module that does not import, a factory that rejects its options or returns no tool, two
tools of one name, the Python tool without a sandbox -- is one ``ToolConfigError`` line, raised
where the tools are built, before any rollout.

``ToolSet.run`` is the agent's one way to call a tool (``rstar2.agent.tools.base`` says what a
call may return and raise): argument errors come back as 'parse_error', other failures as
'error', a tool that does not answer within the run's tool deadline as 'timeout' (tools that
time themselves, the sandbox, are left to their own limit); only ``ToolUnavailable`` and the
sandbox's ``SandboxUnavailable`` propagate.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import model_serializer, model_validator

from rstar2.agent.tools.base import ArgumentError, Tool, ToolError, ToolResult, ToolUnavailable
from rstar2.agent.tools.calculator import Calculator
from rstar2.agent.tools.python import PYTHON_TOOL_NAME, CodeRunner, PythonTool
from rstar2.errors import Rstar2Error
from rstar2.sandbox import SandboxUnavailable
from rstar2.section import Section


class ToolConfigError(Rstar2Error, ValueError):
    """A tool list that cannot be built (the message names the entry and what is wrong)."""


class ToolSpec(Section):
    """One entry of ``rollout.tools``; a bare string is its ``use``."""

    use: str
    """'python' (the sandbox, the paper's tool), 'calculator', or your own tool as
    'package.module:factory' (a class or function that returns a tool)."""
    options: dict[str, Any] = {}
    """Keyword arguments of the tool's factory, e.g. {path: data/constants.json}."""

    @model_validator(mode="before")
    @classmethod
    def bare_name(cls, value: Any) -> Any:
        return {"use": value} if isinstance(value, str) else value

    @model_serializer(mode="wrap")
    def bare_when_plain(self, handler) -> Any:
        """Written back (a run's config.yaml, the config reference) as a recipe would say it:
        the name alone when there are no options."""
        return self.use if not self.options else handler(self)


@dataclass(frozen=True)
class ToolContext:
    """What a run hands the factories of its tools."""

    runner: CodeRunner | None = None
    """The sandbox client the Python tool runs programs on (None: no sandbox in this run)."""
    timeout_s: float | None = None
    """Wall-clock limit of one tool call (``rollout.tool_timeout_s``)."""
    python_name: str = PYTHON_TOOL_NAME
    """The name the prompt gives the Python tool (``rollout.prompt.tool_name``)."""


def python_tool(context: ToolContext, name: str | None = None) -> PythonTool:
    if context.runner is None:
        raise ToolConfigError("the python tool needs a sandbox, and this run has none")
    return PythonTool(context.runner, context.timeout_s, name or context.python_name)


def calculator_tool(context: ToolContext, name: str = "calculator") -> Calculator:
    return Calculator(name)


TOOLS: dict[str, Callable[..., Tool]] = {"python": python_tool, "calculator": calculator_tool}
"""The tools a recipe names without a module path."""


class ToolSet:
    """The tools one agent offers, by name, in the order the prompt lists them."""

    def __init__(self, tools: Sequence[Tool], timeout_s: float | None = None):
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self.tools:
                raise ToolConfigError(f"two tools are named {tool.name!r}; give one another name (options: {{name: ...}})")
            self.tools[tool.name] = tool
        self.timeout_s = timeout_s

    def __len__(self) -> int:
        return len(self.tools)

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    @property
    def schemas(self) -> list[dict]:
        return [tool.schema for tool in self.tools.values()]

    async def run(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call tool ``name`` (the caller checked that it exists); see the module docstring."""
        tool = self.tools[name]
        started = time.perf_counter()
        try:
            if self.timeout_s is None or getattr(tool, "self_timed", False):
                value = await tool.call(arguments)
            else:
                value = await asyncio.wait_for(tool.call(arguments), self.timeout_s)
        except (ToolUnavailable, SandboxUnavailable):
            raise
        except ArgumentError as error:
            return ToolResult(str(error), "parse_error")
        except ToolError as error:
            return ToolResult(str(error), "error", time.perf_counter() - started)
        except asyncio.TimeoutError:
            return ToolResult(f"Timeout: the tool did not answer within {self.timeout_s:g} s.", "timeout",
                              time.perf_counter() - started)
        except Exception as error:  # noqa: BLE001 -- a tool's bug is its response, not the run's end
            return ToolResult(f"Error: {type(error).__name__}: {error}", "error", time.perf_counter() - started)
        if isinstance(value, ToolResult):
            return value
        if not isinstance(value, str):
            return ToolResult(f"Error: the tool returned {type(value).__name__}, not text.", "error")
        return ToolResult(value, "ok", time.perf_counter() - started)


def open_tools(specs: Sequence[ToolSpec], context: ToolContext) -> ToolSet:
    """The ``ToolSet`` a recipe's tool list describes (module docstring)."""
    return ToolSet([build_tool(spec, context) for spec in specs], context.timeout_s)


class UnopenedSandbox:
    """The runner of tools built only for their schemas (``describe_tools``): nothing runs."""

    async def run(self, code: str, stdin: str = "", timeout_s: float | None = None):
        raise ToolUnavailable("these tools were built for their schemas; no sandbox is open")


def describe_tools(specs: Sequence[ToolSpec], context: ToolContext) -> list[dict]:
    """The schemas of the tools ``specs`` name, without a sandbox: what the prompt will list,
    and a check of the list before a run starts anything (``ToolConfigError`` as ``open_tools``)."""
    with_runner = ToolContext(context.runner or UnopenedSandbox(), context.timeout_s, context.python_name)
    return open_tools(specs, with_runner).schemas


def build_tool(spec: ToolSpec, context: ToolContext) -> Tool:
    factory = TOOLS.get(spec.use) or imported_factory(spec.use)
    keywords = dict(spec.options)
    if spec.use in TOOLS or "context" in signature_parameters(factory):
        keywords["context"] = context
    try:
        tool = factory(**keywords)
    except ToolConfigError:
        raise
    except Exception as error:  # noqa: BLE001 -- the user's factory, reported in one line
        raise ToolConfigError(f"tool {spec.use!r}: {type(error).__name__}: {error}") from None
    if not isinstance(tool, Tool) or not isinstance(tool.name, str) or not isinstance(tool.schema, dict):
        raise ToolConfigError(f"tool {spec.use!r}: the factory returned {type(tool).__name__}, not a tool "
                              "(a name, a schema and an async call(arguments))")
    if not inspect.iscoroutinefunction(tool.call):
        raise ToolConfigError(f"tool {spec.use!r}: call must be async (async def call(self, arguments))")
    return tool


def imported_factory(path: str) -> Callable[..., Tool]:
    module_name, sep, name = path.partition(":")
    if not sep:
        raise ToolConfigError(f"unknown tool {path!r}: use one of {', '.join(TOOLS)}, or package.module:factory")
    try:
        factory = getattr(importlib.import_module(module_name), name, None)
    except ImportError as error:
        raise ToolConfigError(f"tool {path!r}: cannot import {module_name} ({error})") from None
    if not callable(factory):
        raise ToolConfigError(f"tool {path!r}: {module_name} has no {name!r} to build a tool with")
    return factory


def signature_parameters(factory: Callable) -> set[str]:
    try:
        return set(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        return set()
