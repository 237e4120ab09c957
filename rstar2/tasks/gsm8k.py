"""Cold-start traces from GSM8K's calculator annotations, played through the real agent loop.

    task = gsm8k_task(problem)                   # raises AnnotationError when it cannot be made
    built = await gsm8k_traces(problems, tokenizer, sandbox, prompt, broken_share=0.0, seed=0)
    built.traces, built.kept, built.dropped      # dropped: Counter of reasons

GSM8K solutions mark every computation, e.g. ``48/2 = <<48/2=24>>24 clips in May``. One short
trace per problem: the program and the answer, no paraphrase of the solution (every token of
a trace is paid again in each SFT forward and backward pass, and in every rollout RL samples):

* an empty ``<reason>``, then one tool call whose program computes the annotated steps in
  order, each into a variable named from the words around it (``clips_may = 48 / 2``): the
  names are the plan; a number in a later step equal to an earlier step's result (and not given
  in the problem) becomes that step's variable, so the program chains its own values instead of
  copying the annotator's; it ends with ``print(round(last))``: every GSM8K answer is an
  integer (the report's RL data rule) and ``round`` hides float noise such as
  ``0.30000000000000004``;
* the sandbox's real output, then ``<answer>\\boxed{N}</answer>`` with the gold N.

A number-substitution variant (``rstar2.tasks.gsm8k_variants``) carries its program in
``row['program']`` and its sandbox-computed gold as its answer; its trace is made the same way.

The trace is built by ``rstar2.tasks.traces.make_trace`` (a scripted engine inside the agent
loop), so its prompt, tokens, tool-response turn and loss mask are exactly the agent's. A trace
is dropped, and counted by reason, when the solution has no annotation, an annotation is not
arithmetic Python even after the usual repairs (``$``, thousands commas, ``x`` for times, ``^``,
``%``, leading zeros), or the sandbox does not print the gold answer (e.g. the last annotation
is not the final answer, or the annotator rounded an intermediate result).

The GSM8K recipe (``rstar2.demo.gsm8k``) trains on the traces it builds here; ``rstar2 data
sft-traces`` writes them as SFT conversations (``rstar2.sft.dataset.write_gsm8k_conversations``).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import keyword
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rstar2.agent.prompt import PromptConfig
from rstar2.agent.rollout import CodeRunner
from rstar2.agent.trajectory import Trajectory
from rstar2.data.problems import Problem
from rstar2.errors import Rstar2Error
from rstar2.tasks.templates import Task
from rstar2.tasks.traces import TraceError, make_trace

ANNOTATION = re.compile(r"<<([^<>]*)>>")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
ARITHMETIC_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop)
STOP_WORDS = frozenset(
    "a an the of in on at to for from by with and or but so then that this these those is are was "
    "were be been will would can could has have had do does did it its he she they we you i his her "
    "their our your him them which who what when where how much many per each every there here if "
    "because since as after before than into out up about also just only more less now still".split())
VISIBLE_EXPRESSION = set("0123456789.,+-*/xX×÷=()$%^ ")
MAX_NAME_WORDS = 3


class AnnotationError(Rstar2Error, ValueError):
    """A solution whose annotations cannot become a program: ``reason`` is the drop reason
    counted (``no_annotation`` or ``invalid_annotation``), the message says which one failed."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Step:
    """One annotated computation as a program line."""

    name: str
    expression: str
    """Arithmetic Python, earlier results replaced by their variables."""
    result: float | None
    """The annotator's result (None when it is not a number)."""


@dataclass
class BuiltTraces:
    """What ``gsm8k_traces`` made: the kept traces, their problems, and why the rest were dropped."""

    traces: list[Trajectory] = field(default_factory=list)
    kept: list[Problem] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)


def python_expression(text: str) -> str:
    """An annotation's left side as arithmetic Python in one spacing (``48 / 2``); raises
    ``AnnotationError`` if it is not."""
    expr = text.replace("$", "").replace("×", "*").replace("÷", "/").replace("^", "**")
    expr = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", expr)
    expr = re.sub(r"(?<=[\d)])\s*[xX]\s*(?=[\d(.])", "*", expr)
    expr = re.sub(r"(\d+(?:\.\d+)?)\s*%", r"(\1/100)", expr)
    expr = re.sub(r"(?<![\d.])0+(?=\d)", "", expr).strip()
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as error:
        raise AnnotationError("invalid_annotation", f"not Python: {text!r}") from error
    for node in ast.walk(tree):
        if not isinstance(node, ARITHMETIC_NODES) or (
                isinstance(node, ast.Constant) and not isinstance(node.value, int | float)):
            raise AnnotationError("invalid_annotation", f"not arithmetic: {text!r}")
    return ast.unparse(tree)


def number(text: str) -> float | None:
    try:
        return float(text.replace("$", "").replace(",", "").strip())
    except ValueError:
        return None


def words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", text.lower()) if w not in STOP_WORDS and len(w) > 1]


def variable_name(before: str, after: str, taken: set[str], index: int) -> str:
    """A snake_case name from the words after the result (``24 clips in May`` -> ``clips_may``),
    else the words before the visible expression, else ``step<index>``; unique, and never a
    keyword or builtin."""
    following = words(re.split(r"[.,;:!?\n]", after, maxsplit=1)[0])[:MAX_NAME_WORDS]
    head = before.rstrip()
    while head and head[-1] in VISIBLE_EXPRESSION:
        head = head[:-1]
    preceding = words(re.split(r"[.,;:!?\n]", head)[-1])[-MAX_NAME_WORDS:]
    name = "_".join(following or preceding) or f"step{index}"
    if keyword.iskeyword(name) or hasattr(builtins, name) or name == "answer":
        name = f"{name}_value"
    unique, n = name, 2
    while unique in taken:
        unique, n = f"{name}_{n}", n + 1
    taken.add(unique)
    return unique


def link_results(expression: str, earlier: Sequence[Step], given: set[float]) -> str:
    """``expression`` with each number equal to an earlier result (and not a number the problem
    gives) replaced by the latest such step's variable."""
    def replace(match: re.Match) -> str:
        value = float(match.group())
        if value in given:
            return match.group()
        for step in reversed(earlier):
            if step.result is not None and abs(step.result - value) < 1e-9:
                return step.name
        return match.group()

    return NUMBER.sub(replace, expression)


def solution_steps(problem: str, solution: str) -> list[Step]:
    """The annotated computations of ``solution`` as program steps (module docstring)."""
    body = solution.split("####", 1)[0]
    given = {float(n) for n in NUMBER.findall(problem.replace(",", ""))}
    steps: list[Step] = []
    taken: set[str] = set()
    for match in ANNOTATION.finditer(body):
        left, eq, right = match.group(1).rpartition("=")
        if not eq:
            raise AnnotationError("invalid_annotation", f"no '=' in <<{match.group(1)}>>")
        expression = link_results(python_expression(left), steps, given)
        line_start = body.rfind("\n", 0, match.start()) + 1
        name = variable_name(body[line_start:match.start()], body[match.end():], taken, len(steps) + 1)
        steps.append(Step(name=name, expression=expression, result=number(right)))
    if not steps:
        raise AnnotationError("no_annotation", "no calculator annotation")
    return steps


def program(steps: Sequence[Step]) -> str:
    lines = [f"{step.name} = {step.expression}" for step in steps]
    return "\n".join([*lines, f"print(round({steps[-1].name}))"])


def gsm8k_task(problem: Problem) -> Task:
    """The scripted task of one GSM8K row: its program from ``row['program']`` (a variant's)
    or from the annotations in ``row['solution']``; no reasoning text (a short trace)."""
    code = problem.row.get("program")
    if code is None:
        solution = problem.row.get("solution")
        if not solution:
            raise AnnotationError("no_annotation", "the row has no 'solution'")
        code = program(solution_steps(problem.problem, solution))
    return Task(family="gsm8k", level="basic", key=problem.id, question=problem.problem, code=code,
                answer=int(problem.answer), reason="")


def step_count(problem: Problem) -> int | None:
    """How many computations the problem's solution makes (a variant's, its original's); None
    when it has no program. Fewer steps, easier problem: the RL curriculum's order."""
    if "steps" in problem.row:
        return int(problem.row["steps"])
    try:
        return len(solution_steps(problem.problem, problem.row.get("solution") or ""))
    except AnnotationError:
        return None


async def gsm8k_traces(problems: Sequence[Problem], tokenizer, runner: CodeRunner, prompt: PromptConfig,
                       broken_share: float = 0.0, seed: int = 0, concurrency: int = 64,
                       on_done: Callable[[], None] | None = None) -> BuiltTraces:
    """One trace per problem that yields one, in input order; a seeded ``broken_share`` of them
    first run a broken program and fix it (as the demo's). Drop reasons: ``no_annotation``,
    ``invalid_annotation``, ``output_not_gold``. ``on_done()`` is called as each problem is
    finished (a progress bar)."""
    rng = np.random.default_rng([seed, 1])
    variants = [int(rng.integers(2)) if rng.random() < broken_share else None for _ in problems]
    limit = asyncio.Semaphore(concurrency)

    async def attempt(problem: Problem, variant: int | None) -> Trajectory | str:
        try:
            task = gsm8k_task(problem)
        except AnnotationError as error:
            return error.reason
        async with limit:
            try:
                return await make_trace(task, tokenizer, runner, prompt, variant)
            except TraceError:
                return "output_not_gold"

    async def one(problem: Problem, variant: int | None) -> Trajectory | str:
        outcome = await attempt(problem, variant)
        if on_done is not None:
            on_done()
        return outcome

    built = BuiltTraces()
    outcomes = await asyncio.gather(*(one(p, v) for p, v in zip(problems, variants)))
    for problem, outcome in zip(problems, outcomes):
        if isinstance(outcome, str):
            built.dropped[outcome] += 1
        else:
            built.traces.append(outcome)
            built.kept.append(problem)
    return built
