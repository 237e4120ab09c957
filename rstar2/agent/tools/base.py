"""The tool protocol: what the agent loop needs of a tool, and what a tool call comes back as.

    class Lookup:                                   # any object of this shape is a Tool
        name = "lookup"
        schema = function_schema("lookup", "Look up a constant by name.",
                                 {"key": {"type": "string", "description": "The constant's name."}})
        async def call(self, arguments: dict) -> str:
            return TABLE[checked_arguments(self.schema, arguments)["key"]]

Contract of a ``Tool``:

* ``name`` is what the model writes in ``{"name": ..., "arguments": {...}}``; ``schema`` is its
  OpenAI function schema (``{"type": "function", "function": {name, description,
  parameters}}``), shown to the model in the prompt's ``<tools>`` block;
* ``await call(arguments)`` returns the response text the model reads, or a ``ToolResult``
  when the outcome is more than text (a status, a duration);
* errors are the tool's response, never the loop's: ``ToolError`` (a call the tool cannot
  serve, its message the response) and ``ArgumentError`` (the arguments do not fit the
  schema) become failed calls the model reads, and so does any other exception, with its type
  and message; only ``ToolUnavailable`` (the service behind the tool is gone) stops the run,
  since feeding the model made-up failures would train it on them.

Every failed call counts as a tool error for Resample-on-Correct, whichever tool made it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from rstar2.errors import Rstar2Error

ToolStatus = Literal["ok", "error", "timeout", "killed", "parse_error"]
JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,),
}
TYPE_WORDS = {"string": "a string", "integer": "an integer", "number": "a number",
              "boolean": "true or false", "array": "a list", "object": "an object"}


@dataclass(frozen=True)
class ToolResult:
    """One call's outcome as the agent records it."""

    text: str
    """The response the model reads (before the agent clips it to its token budget)."""
    status: ToolStatus = "ok"
    """'ok'; 'error' (the call failed); 'timeout' (it ran past its limit and was stopped);
    'killed' (its process died under it); 'parse_error' (its arguments did not fit, set by
    ``ToolSet.run`` from an ``ArgumentError``)."""
    duration_s: float = 0.0
    """How long the call ran, where the tool measures it."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class ToolError(Rstar2Error):
    """A call the tool cannot serve; the message is the response the model reads."""


class ArgumentError(ToolError):
    """The call's arguments do not fit the tool's schema (recorded as a parse error)."""


class ToolUnavailable(Rstar2Error, RuntimeError):
    """The service behind a tool is unreachable: the run stops instead of answering the model."""


@runtime_checkable
class Tool(Protocol):
    """What the agent loop calls (module docstring)."""

    name: str
    schema: dict

    async def call(self, arguments: dict[str, Any]) -> str | ToolResult: ...


def function_schema(name: str, description: str, properties: dict[str, dict],
                    required: list[str] | None = None) -> dict:
    """An OpenAI function schema; every property is required unless ``required`` says which."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties,
                       "required": list(properties) if required is None else required}}}


def checked_arguments(schema: dict, arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` when they fit ``schema``'s parameters (required ones present, each of its
    JSON type, none unknown), else ``ArgumentError`` saying what the model got wrong."""
    parameters = schema["function"].get("parameters", {})
    properties: dict[str, dict] = parameters.get("properties", {})
    for name in parameters.get("required", []):
        if name not in arguments:
            raise ArgumentError(f'Error: the tool call is missing the "{name}" argument '
                                f'({describe(properties.get(name, {}))}).')
    for name, value in arguments.items():
        if name not in properties:
            known = ", ".join(f'"{key}"' for key in properties) or "none"
            raise ArgumentError(f'Error: unknown argument "{name}" (the arguments are {known}).')
        kind = properties[name].get("type")
        allowed = JSON_TYPES.get(kind, (object,))
        if not isinstance(value, allowed) or (isinstance(value, bool) and kind in ("integer", "number")):
            raise ArgumentError(f'Error: the "{name}" argument must be {describe(properties[name])}.')
    return arguments


def describe(property_schema: dict) -> str:
    """``a string: the expression to evaluate``: a parameter's type and description in words."""
    words = TYPE_WORDS.get(property_schema.get("type", ""), "a value")
    text = property_schema.get("description", "").rstrip(".")
    return f"{words}: {text[:1].lower()}{text[1:]}" if text else words
