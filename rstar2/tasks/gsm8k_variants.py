"""Number-substitution variants of GSM8K problems: new numbers, the same program, the sandbox's gold.

    built = await number_variants(problems, sandbox, per_problem=1, seed=0)
    built.variants        # Problems 'gsm8k-train-0000-v1', ...: new text, new gold, row['program']
    built.dropped         # Counter of why a problem gave no variant

A GSM8K row's annotations become a program (``rstar2.tasks.gsm8k``). A variant changes the
numbers the problem states, in its text and in that program alike, runs the program in the real
sandbox, and takes what it computes as the new gold answer. So a variant is a new problem
whose answer nobody wrote down but the program, and the 7.5K annotated rows become as many
problems as wanted, for SFT traces (more data) and for RL (problems the SFT never saw).

Which numbers change: those written as digits in the problem that the program uses as
literals, except 0 and 1 and any value the text also implies in words (``half`` is 2, ``dozen``
12, ``hours`` 60 or 24, ``percent`` 100, ``three`` 3 ...), since the program may use that
literal for the word, which the text would not change with it. Each such value gets a new one of
its kind (a small count another small count; a round price another round price, up to about
half or twice the original; the same decimals), the same new value at every occurrence, and no
two values of one problem become equal.

A draw is kept only if the program still makes sense of it: every step that computed a whole,
or non-negative, number in the original computes one in the variant (no 2.5 people, no -3
eggs), and the answer is a non-negative integer below ``MAX_ANSWER``: the report's integer-answer
rule. Up to ``attempts`` draws per variant. A problem gives no variant when its program does
not follow from its text alone: a literal the annotator computed in prose (``184`` for
``200 - 16``) would not change with the numbers it came from, so the new gold would be wrong.
Drop reasons, counted: ``no_annotation`` and ``invalid_annotation`` (no program, as for
traces), ``nothing_to_change`` (no stated number may change), ``program_failed`` (the original
program does not run in the sandbox, or prints no list of numbers), ``unexplained_number`` and
``ambiguous_number`` (``unsure_literals``), ``no_integer_variant`` (no draw passed).
"""

from __future__ import annotations

import ast
import asyncio
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rstar2.agent.rollout import CodeRunner
from rstar2.data.problems import Problem
from rstar2.tasks.gsm8k import NUMBER, AnnotationError, Step, program, solution_steps

TEXT_NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?!\w|[.,]\d)")
"""A number written in a problem: ``48``, ``1,200``, ``2.50``; a sentence's full stop after it is
not a decimal point."""
IMPLIED_BY_WORDS: dict[str, tuple[int, ...]] = {
    "two": (2,), "three": (3,), "four": (4,), "five": (5,), "six": (6,), "seven": (7,), "eight": (8,),
    "nine": (9,), "ten": (10,), "eleven": (11,), "twelve": (12,), "twenty": (20,), "thirty": (30,),
    "forty": (40,), "fifty": (50,), "sixty": (60,), "seventy": (70,), "eighty": (80,), "ninety": (90,),
    "hundred": (100,), "thousand": (1000,), "half": (2,), "halves": (2,),
    "twice": (2,), "double": (2,), "pair": (2,), "both": (2,), "triple": (3,), "thrice": (3,),
    "third": (3,), "quarter": (4,), "fourth": (4,), "fifth": (5,), "dozen": (12,), "percent": (100,),
    "cents": (100,), "hour": (60, 24), "minut": (60,), "second": (60,), "day": (24, 7, 30, 365),
    "week": (7, 52), "month": (12, 30, 4), "year": (12, 52, 365), "score": (20,), "century": (100,),
    "decade": (10,), "foot": (12,), "feet": (12,), "inch": (12,), "yard": (3, 36), "quart": (4,),
    "gallon": (4, 128), "pound": (16,), "ounce": (16,), "meter": (100,), "kilo": (1000,),
}
"""Values a word in the problem may bring into its program without the digits being written,
keyed by the start of the word (``dozen`` also stands for ``dozens``)."""
MAX_ANSWER = 10_000_000
INTEGER_TOLERANCE = 1e-6


@dataclass
class BuiltVariants:
    """What ``number_variants`` made: the variants, and why the other problems gave none."""

    variants: list[Problem] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)


def implied_values(text: str) -> set[float]:
    """Values the words of ``text`` may stand for (words starting with a key of
    ``IMPLIED_BY_WORDS``; a ``%`` sign implies 100)."""
    words = set(re.findall(r"[a-z]+", text.lower()))
    values = {100.0} if "%" in text else set()
    for start, implied in IMPLIED_BY_WORDS.items():
        if any(word.startswith(start) for word in words):
            values.update(float(v) for v in implied)
    return values


def text_value(match: re.Match) -> float:
    return float(match.group(1).replace(",", "") + (match.group(2) or ""))


def changeable_values(problem_text: str, steps: Sequence[Step]) -> list[float]:
    """The stated values a variant changes (module docstring), in order of first mention."""
    literals = {float(n) for step in steps for n in NUMBER.findall(step.expression)}
    implied = implied_values(problem_text)
    stated = [text_value(m) for m in TEXT_NUMBER.finditer(problem_text)]
    return list(dict.fromkeys(v for v in stated if v in literals and v not in implied and v not in (0.0, 1.0)))


def unsure_literals(problem_text: str, steps: Sequence[Step], values: Sequence[float]) -> str | None:
    """Why the program's literals do not all follow from the text, or None when they do: a
    literal neither stated, implied by a word, 0 nor 1 was computed by the annotator in prose
    (``unexplained_number``: it would not change with the numbers it came from); a stated
    literal equal to an earlier step's value may be that step's result copied
    (``ambiguous_number``: changing it would cut the chain)."""
    stated = {text_value(m) for m in TEXT_NUMBER.finditer(problem_text)}
    allowed = stated | implied_values(problem_text) | {0.0, 1.0}
    for index, step in enumerate(steps):
        for value in (float(n) for n in NUMBER.findall(step.expression)):
            if value not in allowed:
                return "unexplained_number"
            if value in stated and any(abs(value - earlier) < INTEGER_TOLERANCE for earlier in values[:index]):
                return "ambiguous_number"
    return None


def decimals(value: float) -> int:
    """Digits after the point a value is written with (at most 4)."""
    for digits in range(5):
        if abs(value * 10 ** digits - round(value * 10 ** digits)) < 1e-9:
            return digits
    return 4


def new_value(rng: np.random.Generator, value: float) -> float:
    """A value of the same kind as ``value``: the same decimals; a small count (under 10)
    becomes another from 2 to 12; a larger one a multiple of its roundness (1000, 100, 50, 10,
    5 or 1, while the value is at least four of them) between about half and twice it."""
    digits = decimals(value)
    scaled = int(round(value * 10 ** digits))
    if scaled < 10:
        candidates = np.arange(2, 13)
    else:
        unit = next(u for u in (1000, 100, 50, 10, 5, 1) if scaled % u == 0 and scaled >= 4 * u)
        candidates = np.arange(max(unit, math.ceil(scaled / 2 / unit) * unit), 2 * scaled + 1, unit)
    candidates = candidates[candidates != scaled]
    return float(rng.choice(candidates)) / 10 ** digits


def substitution(rng: np.random.Generator, values: Sequence[float], keep: set[float]) -> dict[float, float]:
    """A new value for each of ``values``, all distinct and none equal to a value in ``keep``
    (the problem's other numbers); a value with no free candidate in 20 draws stays as it is."""
    taken = set(keep) | set(values)
    mapping: dict[float, float] = {}
    for value in values:
        for _ in range(20):
            candidate = new_value(rng, value)
            if candidate not in taken:
                mapping[value] = candidate
                taken.add(candidate)
                break
    return mapping


def written(value: float, like: str) -> str:
    """``value`` written as the text wrote the number it replaces (thousands commas, decimals)."""
    digits = len(like.partition(".")[2])
    text = f"{value:,.{digits}f}" if "," in like else f"{value:.{digits}f}"
    return text


def substitute_text(text: str, mapping: dict[float, float]) -> str:
    def replace(match: re.Match) -> str:
        value = text_value(match)
        return written(mapping[value], match.group(0)) if value in mapping else match.group(0)

    return TEXT_NUMBER.sub(replace, text)


def literal(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def substitute_steps(steps: Sequence[Step], mapping: dict[float, float]) -> list[Step]:
    def replace(match: re.Match) -> str:
        value = float(match.group())
        return literal(mapping[value]) if value in mapping else match.group()

    return [Step(step.name, NUMBER.sub(replace, step.expression), None) for step in steps]


def values_program(steps: Sequence[Step]) -> str:
    """The steps, then every step's value printed as one Python list."""
    lines = [f"{step.name} = {step.expression}" for step in steps]
    return "\n".join([*lines, f"print([{', '.join(step.name for step in steps)}])"])


async def step_values(runner: CodeRunner, steps: Sequence[Step]) -> list[float] | None:
    """The value of every step, computed by the sandbox; None when the program fails."""
    result = await runner.run(values_program(steps))
    if not result.ok:
        return None
    try:
        values = ast.literal_eval(result.stdout.strip())
    except (ValueError, SyntaxError):
        return None
    if not isinstance(values, list) or len(values) != len(steps) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        return None
    return [float(v) for v in values]


def is_whole(value: float) -> bool:
    return abs(value - round(value)) < INTEGER_TOLERANCE


def makes_sense(original: Sequence[float], variant: Sequence[float]) -> bool:
    """Whole steps stay whole, non-negative steps stay non-negative, and the answer is a
    non-negative integer under ``MAX_ANSWER``."""
    for before, after in zip(original, variant):
        if (is_whole(before) and not is_whole(after)) or (before >= 0 > after):
            return False
    answer = variant[-1]
    return is_whole(answer) and 0 <= answer < MAX_ANSWER


async def problem_variants(problem: Problem, runner: CodeRunner, count: int, rng: np.random.Generator,
                           attempts: int) -> list[Problem] | str:
    """Up to ``count`` variants of one problem, or the reason it gives none."""
    solution = problem.row.get("solution")
    if not solution:
        return "no_annotation"
    try:
        steps = solution_steps(problem.problem, solution)
    except AnnotationError as error:
        return error.reason
    values = changeable_values(problem.problem, steps)
    if not values:
        return "nothing_to_change"
    original = await step_values(runner, steps)
    if original is None:
        return "program_failed"
    unsure = unsure_literals(problem.problem, steps, original)
    if unsure:
        return unsure
    others = {text_value(m) for m in TEXT_NUMBER.finditer(problem.problem)} - set(values)
    variants: list[Problem] = []
    seen_texts = {problem.problem}
    for _ in range(attempts):
        if len(variants) == count:
            break
        mapping = substitution(rng, values, others)
        text = substitute_text(problem.problem, mapping)
        new_steps = substitute_steps(steps, mapping)
        computed = await step_values(runner, new_steps)
        if text in seen_texts or computed is None or not makes_sense(original, computed):
            continue
        seen_texts.add(text)
        answer = str(int(round(computed[-1])))
        variant_id = f"{problem.id}-v{len(variants) + 1}"
        variants.append(Problem(id=variant_id, problem=text, answer=answer, row={
            "id": variant_id, "problem": text, "answer": answer, "variant_of": problem.id,
            "program": program(new_steps), "steps": len(steps)}))
    return variants or "no_integer_variant"


async def number_variants(problems: Sequence[Problem], runner: CodeRunner, per_problem: int = 1,
                          seed: int = 0, attempts: int = 10, concurrency: int = 64,
                          on_done: Callable[[], None] | None = None) -> BuiltVariants:
    """``per_problem`` variants of each problem where it can have them (module docstring), in
    input order; each problem draws from a stream seeded by ``seed`` and its id, so its variants
    depend neither on the other problems given nor on the order the sandbox answers in.
    ``on_done()`` is called as each problem is finished (a progress bar)."""
    limit = asyncio.Semaphore(concurrency)

    async def one(problem: Problem) -> list[Problem] | str:
        async with limit:
            rng = np.random.default_rng([seed, zlib.crc32(problem.id.encode())])
            outcome = await problem_variants(problem, runner, per_problem, rng, attempts)
        if on_done is not None:
            on_done()
        return outcome

    built = BuiltVariants()
    for outcome in await asyncio.gather(*(one(p) for p in problems)):
        if isinstance(outcome, str):
            built.dropped[outcome] += 1
        else:
            built.variants.extend(outcome)
    return built
