"""An example tool beside the sandbox: a calculator for arithmetic expressions.

    tool = Calculator()
    await tool.call({"expression": "(17 + 5) * 3 / 4"})      # '16.5'

It shows what a tool is (``rstar2.agent.tools.base``): a name, a schema, an async call that
returns text, and errors as responses. It is also useful where a sandbox is overkill: grade
school arithmetic (GSM8K's calculator annotations are exactly such expressions) with no
process per call.

What it evaluates: numbers, ``+ - * / // % **``, parentheses, and the functions and constants
of ``FUNCTIONS``/``CONSTANTS`` (``sqrt``, ``log``, ``factorial``, ``pi`` ...). Nothing else is
reachable (no names, attributes or calls outside those lists: the expression is read with
``ast``, never ``eval``), and the work is bounded: expressions of at most
``MAX_EXPRESSION_CHARS``, powers and factorials whose result would pass ``MAX_RESULT_DIGITS``
digits are refused. Integers are exact; a float result is shown with 12 significant digits,
and one that is whole is shown as an integer.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from rstar2.agent.tools.base import ToolError, checked_arguments, function_schema

MAX_EXPRESSION_CHARS = 1000
MAX_RESULT_DIGITS = 4000  # under Python's own limit on printing an int (4300 digits)
OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
FUNCTIONS = {
    "sqrt": math.sqrt, "abs": abs, "round": round, "floor": math.floor, "ceil": math.ceil,
    "log": math.log, "log10": math.log10, "exp": math.exp, "sin": math.sin, "cos": math.cos,
    "tan": math.tan, "factorial": math.factorial, "gcd": math.gcd, "lcm": math.lcm, "comb": math.comb,
    "min": min, "max": max,
}
CONSTANTS = {"pi": math.pi, "e": math.e}


class Calculator:
    """The ``calculator`` tool (module docstring)."""

    def __init__(self, name: str = "calculator"):
        self.name = name
        self.schema = function_schema(name, (
            "Evaluate an arithmetic expression and return its value. Supports + - * / // % ** and "
            "parentheses, and the functions " + ", ".join(FUNCTIONS) + " and the constants pi and e."),
            {"expression": {"type": "string", "description": "The expression, e.g. (17 + 5) * 3 / 4."}})

    async def call(self, arguments: dict[str, Any]) -> str:
        expression = checked_arguments(self.schema, arguments)["expression"]
        return shown(evaluate(expression))


def evaluate(expression: str) -> int | float:
    """The value of ``expression``, or ``ToolError`` saying why there is none."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"Error: the expression is longer than {MAX_EXPRESSION_CHARS} characters.")
    try:
        tree = ast.parse(expression.strip().replace("^", "**"), mode="eval")
    except SyntaxError:
        raise ToolError(f"Error: {expression!r} is not an arithmetic expression.") from None
    try:
        value = value_of(tree.body)
        if isinstance(value, int) and value:
            check_digits(math.log10(abs(value)))  # a product of large powers
        return value
    except ZeroDivisionError:
        raise ToolError("Error: division by zero.") from None
    except (ValueError, TypeError, OverflowError) as error:
        raise ToolError(f"Error: {error}.") from None


def value_of(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = value_of(node.left), value_of(node.right)
        if isinstance(node.op, ast.Pow):
            check_power(left, right)
        return OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](value_of(node.operand))
    if isinstance(node, ast.Name) and node.id in CONSTANTS:
        return CONSTANTS[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and not node.keywords:
        arguments = [value_of(argument) for argument in node.args]
        if node.func.id == "factorial" and arguments and isinstance(arguments[0], int) and arguments[0] > 1:
            check_digits(math.lgamma(arguments[0] + 1) / math.log(10))
        return FUNCTIONS[node.func.id](*arguments)
    raise ValueError(f"{ast.unparse(node)!r} is not a number, an operation or one of the functions")


def check_power(base: int | float, exponent: int | float) -> None:
    """Refuse a power whose result would have more than ``MAX_RESULT_DIGITS`` digits."""
    if abs(base) > 1 and exponent > 0:
        check_digits(exponent * math.log10(abs(base)))


def check_digits(digits: float) -> None:
    if digits > MAX_RESULT_DIGITS:
        raise ValueError(f"the result would have more than {MAX_RESULT_DIGITS} digits")


def shown(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}" if isinstance(value, float) else str(value)
