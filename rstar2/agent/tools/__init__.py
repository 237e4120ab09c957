"""Tools the agent offers the model: the protocol, the registry, and the built-in tools.

* ``Tool``, ``ToolResult``, ``ToolError``, ``ArgumentError``, ``ToolUnavailable``,
  ``function_schema``, ``checked_arguments`` -- what a tool is and returns (``base``);
* ``PythonTool`` -- the sandbox, the paper's tool and the default (``python``);
* ``Calculator`` -- an example tool: arithmetic without a process (``calculator``);
* ``ToolSpec``, ``ToolContext``, ``ToolSet``, ``open_tools``, ``describe_tools``, ``TOOLS`` --
  naming tools in a recipe, building them, calling them (``registry``).
"""

from rstar2.agent.tools.base import (ArgumentError, Tool, ToolError, ToolResult, ToolUnavailable,
                                     checked_arguments, function_schema)
from rstar2.agent.tools.calculator import Calculator
from rstar2.agent.tools.python import PYTHON_TOOL_NAME, CodeRunner, PythonTool, python_schema
from rstar2.agent.tools.registry import (TOOLS, ToolConfigError, ToolContext, ToolSet, ToolSpec,
                                         describe_tools, open_tools)

__all__ = [
    "PYTHON_TOOL_NAME", "TOOLS", "ArgumentError", "Calculator", "CodeRunner", "PythonTool", "Tool",
    "ToolConfigError", "ToolContext", "ToolError", "ToolResult", "ToolSet", "ToolSpec", "ToolUnavailable",
    "checked_arguments", "describe_tools", "function_schema", "open_tools", "python_schema",
]
