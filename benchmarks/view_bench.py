"""Time to first paint of ``rstar2 view`` on a demo-sized run folder and on a synthetic one of
hundreds of MB; also the writer of the run folders the viewer's tests open.

Run (a few minutes; take the shared lock so no other heavy job skews the figures)::

    flock /work/bench.lock .venv/bin/python benchmarks/view_bench.py --out runs/view-bench --mb 300

Run folders are written by the project's own writers from real rollouts: per problem, real
trajectories (scripted tool-use traces played through the real agent loop and sandbox, one of
them failing its first call, plus samples of the real embedded model), graded by the real
verifier, judged by RoC (``PaperRoC``, keeping half of each group), summed up by
``step_metrics``, logged by the trainer's ``rollout_rows`` and ``RunLog``; the eval folders by
the eval runner. The large run
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

import httpx
import numpy as np
from rich.console import Console

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.agent.trajectory import Trajectory
from rstar2.data.benchmarks import load_benchmark
from rstar2.data.problems import Problem
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.eval.launch import solution_of
from rstar2.eval.runner import EvalSettings, run_eval
from rstar2.models.loading import load_tokenizer
from rstar2.reward import Grader
from rstar2.rl.advantage import PaperRoC
from rstar2.rl.config import RLConfig
from rstar2.rl.metrics import step_metrics
from rstar2.rl.roc import trajectory_facts
from rstar2.rl.rollout import Rollout
from rstar2.rl.trainer import rollout_rows
from rstar2.sandbox import SandboxClient, local_sandbox
from rstar2.sandbox.local import free_port
from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.tasks.templates import Task
from rstar2.tasks.traces import ScriptedEngine, make_trace
from rstar2.training.config import LoggingConfig
from rstar2.training.runlog import RunLog
from rstar2.view.runs import INDEX_DIR

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
    agent = Agent(engine, tokenizer, sandbox, RolloutConfig(
        max_turns=2, max_response_tokens=max_tokens, temperature=1.0, prompt=PROMPT)) if engine else None

    async def one(number: int, task: Task) -> ProblemRollouts:
        samples = [await wrong_answer(task, tokenizer, sandbox) for _ in range(2)]
        if number % 2 == 0:
            samples = [await make_trace(task, tokenizer, sandbox, PROMPT),
                       await make_trace(task, tokenizer, sandbox, PROMPT, broken_variant=number)] + samples
        if agent is not None:
            samples += await asyncio.gather(*(agent.rollout(task.question) for _ in range(model_samples)))
        return ProblemRollouts(Problem(task.key, task.question, str(task.answer)), samples)

    return list(await asyncio.gather(*(one(number, task) for number, task in enumerate(tasks))))


async def wrong_answer(task: Task, tokenizer, sandbox) -> Trajectory:
    """A one-turn trajectory that answers without the tool, off by one."""
    turn = f"{task.reason}</reason>\n<answer>\\boxed{{{task.answer + 1}}}</answer>"
    engine = ScriptedEngine(tokenizer, [turn], ChatFormat(tokenizer, PROMPT).end_of_turn_id)
    config = RolloutConfig(max_turns=1, max_response_tokens=4096, temperature=1.0, prompt=PROMPT)
    return await Agent(engine, tokenizer, sandbox, config).rollout(task.question)


def write_training_run(run_dir: Path, pool: Sequence[ProblemRollouts], steps: int, groups_per_step: int,
                       grader: Grader, tokenizer, logged_groups: int, start_step: int = 1) -> None:
    """``steps`` steps of groups drawn from ``pool`` in turn, through RoC, the step metrics and
    the trainer's rollout log (``metrics.jsonl`` and ``rollouts/step_N.jsonl``). The pool is
    graded once; ``time/step`` is the seconds this writer spent on the step (no phases: nothing
    was generated or updated)."""
    groups_of = {id(item): graded(item, grader) for item in pool}
    log = RunLog(run_dir, LoggingConfig(), start_step + steps - 1, resume_step=start_step - 1,
                 console=Console(quiet=True))
    try:
        for step in range(start_step, start_step + steps):
            started = time.perf_counter()
            chosen = [pool[(step * groups_per_step + i) % len(pool)] for i in range(groups_per_step)]
            groups = [groups_of[id(item)] for item in chosen]
            rng = np.random.default_rng([0, step])
            decisions = [PaperRoC(RLConfig(steps=1, group_size=max(2, len(group) // 2))).select(
                [r.facts for r in group], rng) for group in groups]
            rows = rollout_rows(step, [item.problem for item in chosen][:logged_groups], groups[:logged_groups],
                                decisions[:logged_groups], tokenizer)
            log.rollouts(step, rows)
            log.step(step, step_metrics(groups, decisions, None, None, 0.0, {"step": time.perf_counter() - started}))
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
                                show_progress=False, reward=grader))


class Viewer:
    """``rstar2 view FOLDER...`` in a subprocess, as a user starts it, ready to answer."""

    def __init__(self, folders: Sequence[Path]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen([sys.executable, "-m", "rstar2", "view", *map(str, folders),
                                         "--port", str(self.port)],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rstar2 view exited: {self.process.stdout.read()}")
            try:
                if httpx.get(f"{self.url}/api/runs", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        raise TimeoutError("rstar2 view did not answer within 60 s")

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def first_paint(browser, url: str) -> float:
    """Seconds from navigation to the page's data-ready mark, in a fresh browser context."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    started = time.perf_counter()
    page.goto(url)
    page.wait_for_selector("body[data-ready]", timeout=120_000)
    seconds = time.perf_counter() - started
    context.close()
    return seconds


def folder_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and INDEX_DIR not in f.parts) / 1e6


def measure(browser, folder: Path, label: str, repeats: int) -> None:
    """Cold (no index cache, fresh server) and warm first paint of ``folder``."""
    shutil.rmtree(folder / INDEX_DIR, ignore_errors=True)
    viewer = Viewer([folder])
    try:
        cold = first_paint(browser, viewer.url)
    finally:
        viewer.close()
    viewer = Viewer([folder])  # a new server over the cached index
    try:
        warm = sorted(first_paint(browser, viewer.url) for _ in range(repeats))
        last = max(int(p.stem.split("_")[1]) for p in (folder / "rollouts").glob("step_*.jsonl"))
        step_mb = (folder / "rollouts" / f"step_{last}.jsonl").stat().st_size / 1e6
        started = time.perf_counter()
        httpx.get(f"{viewer.url}/api/runs/0/steps/{last}/rollouts/0", timeout=60).raise_for_status()
        one_rollout = time.perf_counter() - started
    finally:
        viewer.close()
    print(f"{label}: {folder_mb(folder):.1f} MB ({step_mb:.1f} MB newest step file); first paint cold "
          f"{cold:.2f} s, warm median {warm[len(warm) // 2]:.2f} s (min {warm[0]:.2f}, max {warm[-1]:.2f}, "
          f"{repeats} loads); one rollout {1000 * one_rollout:.0f} ms", flush=True)


async def make_pool(tasks: Sequence[Task], tokenizer, model_samples: int, max_tokens: int) -> list[ProblemRollouts]:
    engine = HFEngine(HFEngineConfig(dtype="bfloat16")) if model_samples else None
    try:
        with local_sandbox(workers=2, timeout_s=4.0) as url:
            async with SandboxClient([url]) as sandbox:
                return await sample_problems(tasks, tokenizer, sandbox, engine, model_samples, max_tokens)
    finally:
        if engine is not None:
            engine.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/view-bench"), help="where the two run folders go")
    parser.add_argument("--mb", type=float, default=300, help="size of the large run folder")
    parser.add_argument("--model-samples", type=int, default=2, help="samples of the real model per problem")
    parser.add_argument("--repeats", type=int, default=5, help="warm page loads per folder")
    args = parser.parse_args()
    tokenizer = load_tokenizer("default")
    tasks = demo_tasks(12)
    started = time.perf_counter()
    pool = asyncio.run(make_pool(tasks, tokenizer, args.model_samples, max_tokens=256))
    print(f"pool: {sum(len(p.trajectories) for p in pool)} real trajectories of {len(pool)} problems "
          f"in {time.perf_counter() - started:.0f} s", flush=True)
    demo, large = args.out / "demo-like", args.out / "large"
    for folder in (demo, large):
        shutil.rmtree(folder, ignore_errors=True)
    with Grader(workers=1) as grader:
        # the demo's shape: 12 steps of 6 groups, 2 logged; three greedy evals of the held-out set
        write_training_run(demo, pool, 12, groups_per_step=6, grader=grader, tokenizer=tokenizer, logged_groups=2)
        for phase in ("base", "sft", "final"):
            write_eval_run(demo / "eval" / phase, tasks, pool, grader)
        step = 0
        while folder_mb(large) < args.mb:
            write_training_run(large, pool, 5, groups_per_step=400, grader=grader, tokenizer=tokenizer,
                               logged_groups=400, start_step=step + 1)
            step += 5
            print(f"large: {step} steps, {folder_mb(large):.0f} MB", flush=True)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        measure(browser, demo, "demo-like run", args.repeats)
        measure(browser, large, "large run", args.repeats)
        browser.close()


if __name__ == "__main__":
    main()
