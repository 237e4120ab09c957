"""Seeded problem templates whose exact answer needs computation a 135M model cannot do in its
head: multi-digit products, sums over ranges, modular powers, counting, small word problems.

    task = make_task(rng, family="modpow", level="hard")
    task.question, task.code, task.answer        # "What is the remainder when ...", "print(pow(...))", "321"

Each family has two levels: ``basic`` (the cold-start SFT's problems) and ``hard`` (the RL
phase's: larger numbers and two-step variants the SFT never shows, e.g. sums of squares, counts
with an exclusion, two-step word problems). The answer is computed here in Python from the same
numbers as ``code``, so a trace can be checked against what the sandbox printed. ``key``
identifies a problem by its family and numbers, which is what train / held-out splits keep
apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

Level = Literal["basic", "hard"]


@dataclass(frozen=True)
class Task:
    """One generated problem with the program that solves it."""

    family: str
    level: Level
    key: str
    """Family and numbers, e.g. ``multiply:4817,392``: equal keys are the same problem."""
    question: str
    code: str
    """A short Python program that prints the answer."""
    answer: int
    reason: str
    """One sentence of reasoning before the tool call."""


def multiply(rng: np.random.Generator, level: Level) -> Task:
    if level == "basic":
        a, b = int(rng.integers(100, 10_000)), int(rng.integers(100, 1_000))
        return Task("multiply", level, f"multiply:{a},{b}", f"What is {a} times {b}?",
                    f"print({a} * {b})", a * b, "Multiplying multi-digit numbers needs exact arithmetic.")
    a, b, c = (int(rng.integers(100, 5_000)) for _ in range(3))
    return Task("multiply", level, f"multiply:{a},{b},{c}", f"Compute {a} * {b} - {c}.",
                f"print({a} * {b} - {c})", a * b - c, "I need an exact product and a difference.")


def range_sum(rng: np.random.Generator, level: Level) -> Task:
    a = int(rng.integers(1, 200))
    b = a + int(rng.integers(50, 900))
    if level == "basic":
        return Task("range_sum", level, f"range_sum:{a},{b}",
                    f"What is the sum of all integers from {a} to {b}?",
                    f"print(sum(range({a}, {b} + 1)))", sum(range(a, b + 1)),
                    "A long sum is safest to add up with a program.")
    b = a + int(rng.integers(20, 200))
    return Task("range_sum", level, f"range_squares:{a},{b}",
                f"What is the sum of the squares of the integers from {a} to {b}?",
                f"print(sum(n * n for n in range({a}, {b} + 1)))", sum(n * n for n in range(a, b + 1)),
                "I will sum the squares with a loop.")


def modpow(rng: np.random.Generator, level: Level) -> Task:
    a, m = int(rng.integers(2, 30)), int(rng.choice([7, 9, 11, 13, 17, 100, 1000]))
    if level == "basic":
        e = int(rng.integers(10, 100))
        return Task("modpow", level, f"modpow:{a},{e},{m}",
                    f"What is the remainder when {a}^{e} is divided by {m}?",
                    f"print(pow({a}, {e}, {m}))", pow(a, e, m), "Python's pow can reduce the power modulo m.")
    e, c = int(rng.integers(100, 2_000)), int(rng.integers(1, 1_000))
    return Task("modpow", level, f"modpow_sum:{a},{e},{c},{m}",
                f"Find the remainder of {a}^{e} + {c} when divided by {m}.",
                f"print((pow({a}, {e}, {m}) + {c}) % {m})", (pow(a, e, m) + c) % m,
                "I will reduce the power modulo m and then add.")


def counting(rng: np.random.Generator, level: Level) -> Task:
    n, k = int(rng.integers(500, 10_000)), int(rng.integers(3, 20))
    if level == "basic":
        return Task("counting", level, f"count_div:{n},{k}",
                    f"How many integers from 1 to {n} are divisible by {k}?",
                    f"print(sum(1 for n in range(1, {n} + 1) if n % {k} == 0))", n // k,
                    "I will count the multiples with a loop.")
    j = int(rng.integers(3, 20))
    while j == k:
        j = int(rng.integers(3, 20))
    count = sum(1 for x in range(1, n + 1) if x % k == 0 and x % j != 0)
    return Task("counting", level, f"count_div_not:{n},{k},{j}",
                f"How many integers from 1 to {n} are divisible by {k} but not by {j}?",
                f"print(sum(1 for n in range(1, {n} + 1) if n % {k} == 0 and n % {j} != 0))", count,
                "I will count them with a loop and both conditions.")


ITEMS = (("box", "pencils"), ("crate", "apples"), ("bag", "marbles"), ("shelf", "books"), ("tray", "cups"))


def word_problem(rng: np.random.Generator, level: Level) -> Task:
    holder, item = ITEMS[int(rng.integers(len(ITEMS)))]
    per, count = int(rng.integers(12, 400)), int(rng.integers(12, 400))
    if level == "basic":
        return Task("word", level, f"word:{holder},{per},{count}",
                    f"Each {holder} holds {per} {item}. How many {item} are in {count} {holder}s?",
                    f"print({per} * {count})", per * count, f"The total is {count} times {per}.")
    gone = int(rng.integers(1, per * count))
    return Task("word", level, f"word_left:{holder},{per},{count},{gone}",
                f"Each {holder} holds {per} {item}. There are {count} {holder}s and {gone} {item} "
                f"are taken away. How many {item} are left?",
                f"print({per} * {count} - {gone})", per * count - gone,
                f"The total is {count} times {per}, minus {gone}.")


FAMILIES: dict[str, Callable[[np.random.Generator, Level], Task]] = {
    "multiply": multiply, "range_sum": range_sum, "modpow": modpow, "counting": counting,
    "word": word_problem,
}


def make_task(rng: np.random.Generator, family: str, level: Level) -> Task:
    return FAMILIES[family](rng, level)


def unique_tasks(rng: np.random.Generator, count: int, level: Level, exclude: set[str]) -> list[Task]:
    """``count`` tasks of ``level`` cycling through the families, none with a key in
    ``exclude`` or repeated; the keys taken are added to ``exclude``."""
    families = list(FAMILIES)
    tasks: list[Task] = []
    while len(tasks) < count:
        task = make_task(rng, families[len(tasks) % len(families)], level)
        if task.key not in exclude:
            exclude.add(task.key)
            tasks.append(task)
    return tasks
