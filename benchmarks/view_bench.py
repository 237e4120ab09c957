"""Time to first paint of ``rstar2 view`` on a demo-sized run folder and on a synthetic one of
hundreds of MB; also the writer of the run folders the viewer's tests open.

Run (a few minutes; take the shared lock so no other heavy job skews the figures)::

    flock /work/bench.lock .venv/bin/python benchmarks/view_bench.py --out runs/view-bench --mb 300

Run folders are written by the project's own writers from real rollouts: per problem, real
trajectories (scripted tool-use traces played through the real agent loop and sandbox, one of
them failing its first call, plus samples of the real embedded model), graded by the real
verifier, judged by RoC (``select_group``), summed up by ``step_metrics``, logged by the
trainer's ``rollout_rows`` and ``RunLog``; the eval folders by the eval runner. The large run
reuses a pool of such groups step after step (so it is large, not long to make).

First paint is measured in headless Chromium (Playwright, the system browser): from navigation
to the page's ``data-ready`` mark (run list, curves and the newest step's rollouts drawn), with
the run's index cache removed (cold) and then present (warm).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.agent.trajectory import Trajectory
from rstar2.data.benchmarks import load_benchmark
from rstar2.data.problems import Problem
from rstar2.eval.launch import solution_of
from rstar2.eval.runner import EvalSettings, run_eval
from rstar2.reward import Grader
from rstar2.rl.config import LoggingConfig, RocConfig
from rstar2.rl.metrics import Rollout, step_metrics
from rstar2.rl.roc import select_group, trajectory_facts
from rstar2.rl.runlog import RunLog
from rstar2.rl.trainer import rollout_rows
from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.sft.tasks import Task
from rstar2.sft.traces import ScriptedEngine, make_trace

PROMPT = PromptConfig(variant="short")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@dataclass
class ProblemRollouts:
    """One problem and real trajectories of it (not yet graded)."""

    problem: Problem
    trajectories: list[Trajectory]


def demo_tasks(count: int) -> list[Task]:
    """``count`` generated arithmetic problems of the demo's held-out kind (half basic, half hard)."""
    return split_tasks(seed=0, sft=1, rl=1, heldout=count).heldout


async def sample_problems(tasks: Sequence[Task], tokenizer, sandbox, engine=None, model_samples: int = 0,
                          max_tokens: int = 24) -> list[ProblemRollouts]:
    """Per task, real trajectories through the agent loop and the sandbox. Even tasks: a
    scripted trace, one that fixes a failing first call, and two scripted wrong answers (RoC
    has a choice to make); odd tasks: the two wrong answers only (RoC drops the group). With an ``engine``,
    ``model_samples`` samples of its model are added to each (sampled log-probs, truncation)."""
    found = []
    for number, task in enumerate(tasks):
        samples = [await wrong_answer(task, tokenizer, sandbox) for _ in range(2)]
        if number % 2 == 0:
            samples = [await make_trace(task, tokenizer, sandbox, PROMPT),
                       await make_trace(task, tokenizer, sandbox, PROMPT, broken_variant=number)] + samples
        if engine is not None and model_samples:
            agent = Agent(engine, tokenizer, sandbox, RolloutConfig(
                max_turns=2, max_response_tokens=max_tokens, temperature=1.0, prompt=PROMPT))
            samples += await asyncio.gather(*(agent.rollout(task.question) for _ in range(model_samples)))
        found.append(ProblemRollouts(Problem(task.key, task.question, str(task.answer)), samples))
    return found


async def wrong_answer(task: Task, tokenizer, sandbox) -> Trajectory:
    """A one-turn trajectory that answers without the tool, off by one."""
    turn = f"{task.reason}</reason>\n<answer>\\boxed{{{task.answer + 1}}}</answer>"
    engine = ScriptedEngine(tokenizer, [turn], ChatFormat(tokenizer, PROMPT).end_of_turn_id)
    config = RolloutConfig(max_turns=1, max_response_tokens=4096, temperature=1.0, prompt=PROMPT)
    return await Agent(engine, tokenizer, sandbox, config).rollout(task.question)


def write_training_run(run_dir: Path, pool: Sequence[ProblemRollouts], steps: int, groups_per_step: int,
                       grader: Grader, tokenizer, logged_groups: int, start_step: int = 1) -> None:
    """``steps`` steps of groups drawn from ``pool`` in turn, through RoC, the step metrics and
    the trainer's rollout log (``metrics.jsonl`` and ``rollouts/step_N.jsonl``)."""
    log = RunLog(run_dir, LoggingConfig(), start_step + steps - 1, resume_step=start_step - 1,
                 console=Console(quiet=True))
    try:
        for step in range(start_step, start_step + steps):
            started = time.perf_counter()
            chosen = [pool[(step * groups_per_step + i) % len(pool)] for i in range(groups_per_step)]
            groups = [graded(item, grader) for item in chosen]
            graded_at = time.perf_counter()
            rng = np.random.default_rng([0, step])
            decisions = [select_group([r.facts for r in group], RocConfig(mode="paper"), rng) for group in groups]
            rows = rollout_rows(step, [item.problem for item in chosen][:logged_groups], groups[:logged_groups],
                                decisions[:logged_groups], tokenizer)
            log.rollouts(step, rows)
            timings = {"reward": graded_at - started, "step": time.perf_counter() - started}
            log.step(step, step_metrics(groups, decisions, None, None, 0.0, timings))
    finally:
        log.close()


def graded(item: ProblemRollouts, grader: Grader) -> list[Rollout]:
    grades = grader.grade_many([(t.assistant_text, item.problem.answer) for t in item.trajectories])
    return [Rollout(t, trajectory_facts(t, grade.reward)) for t, grade in zip(item.trajectories, grades)]


def write_eval_run(out_dir: Path, tasks: Sequence[Task], pool: Sequence[ProblemRollouts], grader: Grader) -> dict:
    """An eval run (``samples.jsonl``, ``results.json``) whose n samples per problem are the
    pool's trajectories, through the eval runner."""
    problems_file = write_problems(out_dir.parent / "heldout.jsonl", tasks)
    by_question = {item.problem.problem: list(item.trajectories) for item in pool}
    n = min(len(item.trajectories) for item in pool)

    async def solve(problem: Problem):
        return solution_of(by_question[problem.problem].pop(0), answer_tag=True)

    settings = EvalSettings(benchmarks=[str(problems_file)], n=n, temperature=1.0, max_tokens=64,
                            max_turns=2, prompt="short", concurrency=1)
    return asyncio.run(run_eval(settings, [load_benchmark(str(problems_file))], solve, out_dir,
                                show_progress=False, grader=grader))
