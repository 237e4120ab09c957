"""Everything a run needs around the runner: the engine, the sandbox, the agent, the solver.

Contract of ``evaluate(settings, out_dir, ...)``: load the benchmarks, open the engine
(``rstar2.engines.registry``), the sandbox (the given services, or a private local one for the
run when the tool is offered) and the agent loop with the run's limits, run ``runner.run_eval``
and close everything, also on failure. An engine or sandbox that fails mid-run becomes
``RunFailed`` saying how many samples are saved and how to continue.

``agent_solver(agent, answer_tag)`` is the bridge from the agent loop to the runner: one
rollout per call, its answer extracted with the reward's own rule (``\\boxed{}`` inside
``<answer>``, the paper's reward; or the last box anywhere with ``answer_tag=False``), and its
counts read from the trajectory.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

from rstar2.agent.prompt import PromptConfig
from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.agent.trajectory import Trajectory
from rstar2.data.benchmarks import load_benchmark
from rstar2.data.problems import FieldMap, Problem
from rstar2.engines.base import EngineError
from rstar2.engines.registry import EngineSpec, open_engine
from rstar2.errors import Rstar2Error
from rstar2.eval.report import markdown_table
from rstar2.eval.runner import (
    SAMPLES_JSONL,
    EvalSettings,
    Solution,
    Solve,
    check_output_dir,
    run_eval,
)
from rstar2.eval.samples import read_outcomes
from rstar2.reward import extract_answer
from rstar2.sandbox import SandboxClient, SandboxError, local_sandbox

DEFAULT_RUNS_DIR = Path("runs/eval")


class RunFailed(Rstar2Error, RuntimeError):
    """The engine or the sandbox failed mid-run; the finished samples are kept."""


def default_out_dir(settings: EvalSettings) -> Path:
    """``runs/eval/<model>_<benches>_n<n>[_short|_notools]``: the same command names the same run,
    so repeating it with ``--resume`` continues it."""
    model = Path(settings.model).stem if settings.model != "default" else "smollm2-135m"
    benches = "+".join(Path(spec).stem for spec in settings.benchmarks)
    variant = {"rstar2": "", "short": "_short"}[settings.prompt] if settings.tools else "_notools"
    name = f"{model}_{benches}_n{settings.n}{variant}"
    return DEFAULT_RUNS_DIR / re.sub(r"[^A-Za-z0-9_.+-]", "-", name)


def solution_of(trajectory: Trajectory, answer_tag: bool) -> Solution:
    """What the runner records of one trajectory."""
    assistant_text = trajectory.assistant_text
    return Solution(
        response="".join(turn.text for turn in trajectory.turns),
        assistant_text=assistant_text,
        answer_tag=answer_tag,
        pred=extract_answer(assistant_text, require_answer_tag=answer_tag),
        response_tokens=len(trajectory.response_ids),
        generated_tokens=sum(trajectory.loss_mask),
        turns=trajectory.num_assistant_turns,
        tool_calls=len(trajectory.tool_calls),
        tool_errors=trajectory.num_tool_errors,
        stop_reason=trajectory.stop_reason,
        truncated=trajectory.truncated,
    )


def agent_solver(agent: Agent, answer_tag: bool = True) -> Solve:
    async def solve(problem: Problem) -> Solution:
        return solution_of(await agent.rollout(problem.problem), answer_tag)

    return solve


def rollout_config(settings: EvalSettings) -> RolloutConfig:
    return RolloutConfig(
        max_turns=settings.max_turns, max_response_tokens=settings.max_tokens,
        temperature=settings.temperature, top_p=settings.top_p, tool_timeout_s=None,
        prompt=PromptConfig(variant=settings.prompt if settings.tools else "no_tools",
                            tool_name=settings.tool_name),
        tools=settings.tool_specs,
    )


def engine_spec(settings: EvalSettings) -> EngineSpec:
    return EngineSpec(kind=settings.engine, model=settings.model, base_url=settings.base_url,
                      tokenizer=settings.tokenizer, dtype=settings.dtype, max_batch_size=settings.concurrency,
                      device=settings.device)


def start_local_sandbox(services: contextlib.ExitStack, workers: int) -> str:
    """A private sandbox for the run, stopped with ``services``."""
    try:
        return services.enter_context(local_sandbox(workers=workers))
    except RuntimeError as error:
        raise RunFailed(f"cannot start a local sandbox: {error}\npass --sandbox-url, or --no-tools") from error


async def evaluate(settings: EvalSettings, out_dir: Path, *, resume: bool = False,
                   sandbox_urls: list[str] | None = None, sandbox_workers: int = 2,
                   show_progress: bool = True) -> dict:
    """Run the eval ``settings`` describe into ``out_dir``; returns the results document."""
    fields = FieldMap(**settings.fields)
    benchmarks = [load_benchmark(spec, settings.data_dir, fields, split=settings.split, subset=settings.subset)
                  for spec in settings.benchmarks]
    check_output_dir(out_dir, settings, resume)  # before the model loads: a refusal should be quick
    engine, tokenizer = open_engine(engine_spec(settings))
    with contextlib.ExitStack() as services:
        if settings.tools and not sandbox_urls:
            sandbox_urls = [start_local_sandbox(services, sandbox_workers)]
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(engine.close)
            runner = await stack.enter_async_context(SandboxClient(sandbox_urls)) if settings.tools else None
            solve = agent_solver(Agent(engine, tokenizer, runner, rollout_config(settings)), settings.answer_tag)
            try:
                return await run_eval(settings, benchmarks, solve, out_dir, resume=resume,
                                      show_progress=show_progress)
            except (EngineError, SandboxError) as error:
                saved = len(read_outcomes(out_dir / SAMPLES_JSONL))
                raise RunFailed(f"{error}\n{saved} samples are saved in {out_dir}; "
                                "fix the cause and repeat the command with --resume") from error


def evaluate_and_report(settings: EvalSettings, out_dir: Path, **options) -> str:
    """``evaluate`` from synchronous code; returns the markdown table and where the run is."""
    document = asyncio.run(evaluate(settings, out_dir, **options))
    return f"{markdown_table(document)}\nrun: {out_dir} (results.json, results.md, samples.jsonl)"
