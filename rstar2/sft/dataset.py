"""The demo's three disjoint problem sets and the SFT traces, generated from one seed.

    splits = split_tasks(seed=0, sft=300, rl=400, heldout=60)
    traces = await sft_traces(splits.sft, tokenizer, sandbox, prompt, broken_every=5)

The held-out set is drawn first (half ``basic``, half ``hard`` problems), then the SFT set
(``basic``) and the RL set (``hard``), each skipping every problem key already taken, so no
problem of the held-out set is ever trained on, in either phase. Every ``broken_every``-th SFT
trace starts with a failing program and fixes it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rstar2.agent.prompt import PromptConfig
from rstar2.agent.rollout import CodeRunner
from rstar2.agent.trajectory import Trajectory
from rstar2.sft.tasks import Task, unique_tasks
from rstar2.sft.traces import make_trace


@dataclass(frozen=True)
class Splits:
    sft: list[Task]
    rl: list[Task]
    heldout: list[Task]


def split_tasks(seed: int, sft: int, rl: int, heldout: int) -> Splits:
    """Disjoint SFT (basic), RL (hard) and held-out (half each) problems; see the docstring."""
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    held = unique_tasks(rng, heldout // 2, "basic", taken)
    held += unique_tasks(rng, heldout - heldout // 2, "hard", taken)
    return Splits(sft=unique_tasks(rng, sft, "basic", taken), rl=unique_tasks(rng, rl, "hard", taken),
                  heldout=held)


async def sft_traces(tasks: Sequence[Task], tokenizer, runner: CodeRunner, prompt: PromptConfig,
                     broken_every: int = 5) -> list[Trajectory]:
    """One trace per task, every ``broken_every``-th one failing first (0: none do)."""

    def broken_variant(index: int) -> int | None:
        return index // broken_every if broken_every and index % broken_every == 0 else None

    return list(await asyncio.gather(*(
        make_trace(task, tokenizer, runner, prompt, broken_variant(i)) for i, task in enumerate(tasks))))


def write_problems(path: Path, tasks: Sequence[Task]) -> Path:
    """A JSONL problem file (``id``, ``problem``, ``answer``, plus family and level) that
    ``rstar2 train`` and ``rstar2 eval`` read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"id": t.key, "problem": t.question, "answer": str(t.answer), "family": t.family,
             "level": t.level} for t in tasks]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_traces(path: Path, traces: Sequence[Trajectory]) -> Path:
    """The SFT traces as JSONL trajectories (``Trajectory.model_validate_json`` reads them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(t.model_dump_json() + "\n" for t in traces), encoding="utf-8")
    return path
