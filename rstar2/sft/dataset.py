"""The demo's three disjoint problem sets, their SFT traces, and the files SFT and RL read.

    splits = split_tasks(seed=0, sft=300, sft_hard=40, rl=400, heldout=60, rl_basic=250)
    traces = await sft_traces(splits.sft, tokenizer, sandbox, prompt, broken_share=0.2, seed=0)
    write_traces(path, ids, questions, traces, end_of_turn)     # chat-format conversations
    write_gsm8k_conversations("gsm8k_train", Path("traces.jsonl"), limit=2000)   # rstar2 data sft-traces

The held-out set is drawn first (half ``basic``, half ``hard`` problems), then the SFT set
(``sft`` basic problems and a few, ``sft_hard``, of the hard kind, so that the model starts RL
able to solve some of them: a group that is always wrong carries no signal) and the RL set
(``rl`` hard problems, then ``rl_basic`` basic ones: RL that sees only the hard variants drifts
on the basic forms it no longer practises, e.g. counts every "divisible by k" problem with the
hard variant's exclusion, while basic problems in its mix send a failing group's signal back),
each skipping every problem key already taken, so no problem of the held-out set is ever
trained on, in either phase. A seeded ``broken_share`` of the SFT traces start with a
failing program and fix it. The problems and traces themselves are made in ``rstar2.tasks``;
this module writes them in the formats ``rstar2 train`` and ``rstar2 sft`` read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.agent.rollout import CodeRunner
from rstar2.agent.trajectory import Trajectory
from rstar2.data.jsonl import write_jsonl
from rstar2.sft.chat import trajectory_messages
from rstar2.tasks.gsm8k import BuiltTraces, gsm8k_traces
from rstar2.tasks.templates import Task, unique_tasks
from rstar2.tasks.traces import make_trace


@dataclass(frozen=True)
class Splits:
    sft: list[Task]
    rl: list[Task]
    heldout: list[Task]


def split_tasks(seed: int, sft: int, rl: int, heldout: int, sft_hard: int = 0, rl_basic: int = 0) -> Splits:
    """Disjoint SFT (basic, plus ``sft_hard`` hard), RL (hard, plus ``rl_basic`` basic) and
    held-out (half each) problems; see the module docstring. The basic RL problems are drawn
    last, so the other sets and the hard RL problems do not depend on ``rl_basic``."""
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    held = unique_tasks(rng, heldout // 2, "basic", taken)
    held += unique_tasks(rng, heldout - heldout // 2, "hard", taken)
    sft_tasks = unique_tasks(rng, sft, "basic", taken) + unique_tasks(rng, sft_hard, "hard", taken)
    rl_tasks = unique_tasks(rng, rl, "hard", taken)
    return Splits(sft=sft_tasks, rl=rl_tasks + unique_tasks(rng, rl_basic, "basic", taken), heldout=held)


async def sft_traces(tasks: Sequence[Task], tokenizer, runner: CodeRunner, prompt: PromptConfig,
                     broken_share: float = 0.2, seed: int = 0) -> list[Trajectory]:
    """One trace per task; a seeded ``broken_share`` of them fail first, drawn independently of
    the family (tasks cycle through families, so "every k-th" would pick one family)."""
    rng = np.random.default_rng([seed, 1])
    broken = [int(rng.integers(2)) if rng.random() < broken_share else None for _ in tasks]
    return list(await asyncio.gather(*(
        make_trace(task, tokenizer, runner, prompt, variant) for task, variant in zip(tasks, broken))))


def write_problems(path: Path, tasks: Sequence[Task]) -> Path:
    """A JSONL problem file (``id``, ``problem``, ``answer``, plus family and level) that
    ``rstar2 train`` and ``rstar2 eval`` read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"id": t.key, "problem": t.question, "answer": str(t.answer), "family": t.family,
             "level": t.level} for t in tasks]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_traces(path: Path, ids: Sequence[str], questions: Sequence[str], traces: Sequence[Trajectory],
                 end_of_turn: str) -> Path:
    """The SFT traces as chat-format conversations (``rstar2.sft.chat``), what ``rstar2 sft``
    reads; ``end_of_turn`` is the chat template's (``ChatFormat.end_of_turn``)."""
    write_jsonl(path, ({"id": key, "messages": trajectory_messages(question, trace, end_of_turn)}
                       for key, question, trace in zip(ids, questions, traces)))
    return path


def write_gsm8k_conversations(source: str, out: Path, limit: int | None = None, broken_share: float = 0.1,
                              seed: int = 0, sandbox_workers: int = 2) -> BuiltTraces:
    """``rstar2 data sft-traces``: the traces of ``source`` (a packaged data set's name or a JSONL
    file of rows with annotated solutions; its first ``limit`` rows) as chat-format
    conversations at ``out`` for ``rstar2 sft``, played through the agent loop with the embedded
    model's tokenizer and a private sandbox. The conversations carry no system message, so the
    SFT recipe's prompt decides how they are asked."""
    from rstar2.data.benchmarks import load_benchmark
    from rstar2.models.loading import load_tokenizer
    from rstar2.sandbox import SandboxClient, local_sandbox

    problems = load_benchmark(source).problems[:limit]
    tokenizer, prompt = load_tokenizer("default"), PromptConfig()

    async def build(url: str) -> BuiltTraces:
        async with SandboxClient([url]) as sandbox:
            return await gsm8k_traces(problems, tokenizer, sandbox, prompt, broken_share, seed)

    with local_sandbox(workers=sandbox_workers) as url:
        built = asyncio.run(build(url))
    write_traces(out, [p.id for p in built.kept], [p.problem for p in built.kept], built.traces,
                 ChatFormat(tokenizer, prompt).end_of_turn)
    return built
