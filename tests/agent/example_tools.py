"""Tools a user could write, named in tests as ``tests.agent.example_tools:NAME``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from rstar2.agent.tools import ToolError, ToolUnavailable, checked_arguments, function_schema


class Lookup:
    """Looks a key up in a local JSON file of constants."""

    def __init__(self, path: str, name: str = "lookup"):
        self.table = json.loads(Path(path).read_text())
        self.name = name
        self.schema = function_schema(name, "Look up a constant by name.",
                                      {"key": {"type": "string", "description": "The constant's name."}})

    async def call(self, arguments: dict) -> str:
        key = checked_arguments(self.schema, arguments)["key"]
        if key not in self.table:
            raise ToolError(f"Error: no constant {key!r}; the constants are {', '.join(self.table)}.")
        return str(self.table[key])


class Broken:
    name = "broken"
    schema = function_schema("broken", "Always fails.", {})

    def __init__(self, context):
        self.context = context  # it asked for the run's context

    async def call(self, arguments: dict) -> str:
        return {"not": "text"}["missing"]


class Slow:
    name = "slow"
    schema = function_schema("slow", "Never answers.", {})

    async def call(self, arguments: dict) -> str:
        await asyncio.sleep(3600)
        return "late"


class Gone:
    name = "gone"
    schema = function_schema("gone", "Its service is down.", {})

    async def call(self, arguments: dict) -> str:
        raise ToolUnavailable("the lookup service is unreachable")


class NotAsync:
    name = "sync"
    schema = function_schema("sync", "A blocking call.", {})

    def call(self, arguments: dict) -> str:
        return "blocked the loop"


def not_a_tool() -> str:
    return "a string"
