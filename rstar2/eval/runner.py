"""One eval run: every (benchmark, problem, sample) solved, graded, logged and reported.

Contract of ``run_eval(settings, solve, out_dir)``:

* the work is n samples of every problem (the first ``limit`` of each benchmark), problem by
  problem so that the n copies of a prompt are in flight together (engines share their prefix);
* at most ``settings.concurrency`` samples are in flight at once;
* each sample is graded as soon as it is solved, through the ``Reward`` protocol as training
  scores its rollouts (``rstar2.reward.score_batch``; the built-in verifier unless the caller
  passes another reward), and appended to ``samples.jsonl`` at once, so a killed run loses
  only what was in flight;
* with ``resume`` the samples already in ``samples.jsonl`` are skipped; the run's generation
  and grading settings (``FIXED_FIELDS``) must match the ones in ``config.json`` (a resumed
  run is one run, not a mixture), while ``n``, ``limit`` and the benchmark list may grow;
* without ``resume`` a directory that already holds samples is refused, never overwritten;
* any failure (engine, sandbox) stops the run loudly after cancelling what is in flight;
  everything finished stays in the log for ``--resume``;
* at the end ``results.json`` and ``results.md`` are written from the log (``report``).

``solve(problem)`` is whatever produces one response (``rstar2.eval.launch.agent_solver`` builds
it from an engine, the agent loop and the sandbox); the runner knows nothing of models.
"""

from __future__ import annotations

import asyncio
import json
import operator
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from rstar2.agent.prompt import DEFAULT_TOOL_NAME
from rstar2.agent.tools import ToolSpec
from rstar2.data.benchmarks import Benchmark
from rstar2.data.problems import Problem
from rstar2.engines.base import SamplerFloat
from rstar2.engines.registry import EngineKind
from rstar2.errors import Rstar2Error
from rstar2.eval.progress import RunProgress
from rstar2.eval.report import build_results, write_reports
from rstar2.eval.samples import SampleKey, SampleOutcome, SampleRecord, open_log
from rstar2.models.device import DEVICE_HELP, DeviceSetting
from rstar2.reward import Grader, Reward, RewardItem, score_batch

CONFIG_JSON = "config.json"
SAMPLES_JSONL = "samples.jsonl"


class EvalSettings(BaseModel):
    """What a run evaluates and how; saved as ``config.json``. Defaults: the paper's §5.1."""

    benchmarks: list[str] = Field(description="Benchmark names or data sets (JSONL or Parquet files, "
                                  "datasets folders, hub ids), in report order.")
    fields: dict[str, str] = Field(default_factory=dict, description="Field mapping of the data sets' "
                                   "rows (rstar2.data.FieldMap: problem, answer, id); empty: the defaults.")
    split: str | None = Field(None, description="Split of the data sets that have several.")
    subset: str | None = Field(None, description="Subset of the hub data sets that have several.")
    model: str = Field("default", description="'default' (SmolLM2-135M-Instruct), a local model path, "
                       "or the served model's name for --engine openai.")
    engine: EngineKind = Field("hf", description="'hf': embedded transformers; 'openai': an "
                               "OpenAI-compatible server at base_url; 'vllm': vLLM in this process.")
    base_url: str | None = Field(None, description="The server's /v1 URL for --engine openai.")
    device: DeviceSetting = Field("auto", description="Where --engine hf runs the "
                        "model: " + DEVICE_HELP)
    tokenizer: str | None = Field(None, description="Local model whose tokenizer to use when `model` "
                                  "is a served name (--engine openai).")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "bfloat16", description="Weights dtype of an in-process model (--engine hf or vllm).")
    n: int = Field(16, ge=1, description="Samples per problem.")
    temperature: SamplerFloat = Field(0.6, ge=0.0, description="Sampling temperature.")
    top_p: SamplerFloat = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_tokens: int = Field(30000, ge=1, description="Token budget of a whole response (all turns).")
    max_turns: int = Field(30, ge=1, description="Assistant turns per rollout.")
    tools: bool = Field(True, description="Offer the Python tool (the paper's prompt) or not.")
    prompt: Literal["rstar2", "short"] = Field("rstar2", description="'rstar2': the paper's prompt (Fig. 3); "
                                               "'short': its few-line form the CPU demo trains with.")
    tool_name: str = Field(DEFAULT_TOOL_NAME, description="Name the model calls the Python tool by.")
    tool_specs: tuple[ToolSpec, ...] = Field((ToolSpec(use="python"),), description="The tools offered "
                                             "with `tools` (a trained model's card: its rollout.tools).")
    answer_tag: bool = Field(True, description="Grade only a \\boxed{} inside <answer> (the paper's "
                             "reward); False also accepts the last \\boxed{} anywhere.")
    limit: int | None = Field(None, ge=1, description="Only the first `limit` problems of each benchmark.")
    concurrency: int = Field(32, ge=1, description="Samples in flight at once.")
    data_dir: str | None = Field(None, description="Where named benchmarks are read; None: packaged.")


# A resumed run must not mix samples drawn or graded under different settings.
FIXED_FIELDS = ("model", "engine", "dtype", "temperature", "top_p", "max_tokens", "max_turns", "tools",
                "prompt", "tool_name", "tool_specs", "answer_tag")


class RunConflict(Rstar2Error, RuntimeError):
    """The output directory holds a run this one must not be mixed with or overwrite."""


@dataclass(frozen=True)
class Solution:
    """One response to one problem, as the solver saw it (graded by the runner)."""

    response: str
    """Every turn's text, tool output included, as the log keeps it."""
    assistant_text: str
    """The assistant's turns alone: what the reward reads, as in training."""
    answer_tag: bool
    """The rule ``pred`` was read by (``RewardItem.answer_tag``), so the grade reads it alike."""
    pred: str | None
    response_tokens: int
    generated_tokens: int
    turns: int
    tool_calls: int
    tool_errors: int
    stop_reason: str
    truncated: bool


Solve = Callable[[Problem], Awaitable[Solution]]


@dataclass(frozen=True)
class SampleTask:
    benchmark: Benchmark
    problem: Problem
    index: int

    @property
    def key(self) -> SampleKey:
        return (self.benchmark.name, self.problem.id, self.index)


def limited(benchmarks: Iterable[Benchmark], limit: int | None) -> list[Benchmark]:
    """The benchmarks cut to their first ``limit`` problems; names must be unique."""
    result = [Benchmark(b.name, b.path, b.problems[:limit]) for b in benchmarks]
    names = [b.name for b in result]
    if len(set(names)) != len(names):
        raise RunConflict(f"two benchmarks share a name ({names}); rename a custom file")
    return result


def pending_tasks(benchmarks: Iterable[Benchmark], n: int, done: Mapping[SampleKey, object]) -> list[SampleTask]:
    """Every sample not yet in ``done``, problem by problem."""
    tasks = (SampleTask(b, p, i) for b in benchmarks for p in b.problems for i in range(n))
    return [task for task in tasks if task.key not in done]


def check_output_dir(out_dir: Path, settings: EvalSettings, resume: bool) -> None:
    """Refuse to overwrite a run, or to resume one made with other generation settings."""
    config_path, samples_path = out_dir / CONFIG_JSON, out_dir / SAMPLES_JSONL
    has_samples = samples_path.is_file() and samples_path.stat().st_size > 0
    if has_samples and not resume:
        raise RunConflict(f"{out_dir} already holds samples; pass --resume to continue that run, "
                          "or choose another --out")
    if resume and config_path.is_file():
        # compared as JSON; a field an older run did not record had its default value then
        current = settings.model_dump(mode="json")
        defaults = EvalSettings.model_validate(
            {name: value for name, value in current.items() if name not in FIXED_FIELDS}).model_dump(mode="json")
        previous = {**defaults, **json.loads(config_path.read_text(encoding="utf-8"))}
        same = {"model": lambda a, b: model_identity(a) == model_identity(b)}
        changed = [f"{name}: {previous[name]!r} -> {current[name]!r}" for name in FIXED_FIELDS
                   if not same.get(name, operator.eq)(previous[name], current[name])]
        if changed:
            raise RunConflict(f"cannot resume {out_dir} with other generation settings ({'; '.join(changed)}); "
                              "use the same settings or another --out")


def model_identity(spec: str) -> str:
    """What a model setting names: a local path as its resolved absolute path (runs/x/final,
    ./runs/x/final and /home/me/runs/x/final are one model), anything else as written."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


def graded_record(task: SampleTask, solution: Solution, correct: bool, seconds: float) -> SampleRecord:
    return SampleRecord(
        bench=task.benchmark.name, problem_id=task.problem.id, sample=task.index, gold=task.problem.answer,
        pred=solution.pred, correct=correct, response=solution.response,
        response_tokens=solution.response_tokens, generated_tokens=solution.generated_tokens,
        turns=solution.turns, tool_calls=solution.tool_calls, tool_errors=solution.tool_errors,
        stop_reason=solution.stop_reason, truncated=solution.truncated, seconds=seconds,
    )


async def run_tasks(tasks: list[SampleTask], solve: Solve, reward: Reward, concurrency: int,
                    on_record: Callable[[SampleRecord], None]) -> None:
    """Solve and grade ``tasks`` with at most ``concurrency`` in flight; the first failure
    cancels the rest and is raised."""
    limit = asyncio.Semaphore(concurrency)

    async def one(task: SampleTask) -> None:
        async with limit:
            started = time.perf_counter()
            solution = await solve(task.problem)
            problem = task.problem
            [scored] = await score_batch(reward, [RewardItem(problem.problem, solution.assistant_text, problem.answer,
                                                             problem.row, answer_tag=solution.answer_tag)])
            on_record(graded_record(task, solution, scored.correct, time.perf_counter() - started))

    running = [asyncio.ensure_future(one(task)) for task in tasks]
    try:
        for finished in asyncio.as_completed(running):
            await finished
    finally:
        for future in running:
            future.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def run_eval(settings: EvalSettings, benchmarks: list[Benchmark], solve: Solve, out_dir: Path, *,
                   resume: bool = False, show_progress: bool = True, reward: Reward | None = None) -> dict:
    """Run (or finish) an eval; returns the results document. See the module docstring.
    ``reward``: one the caller owns and keeps (the demo's verifier, shared with training);
    None opens a one-worker verifier for the run."""
    benchmarks = limited(benchmarks, settings.limit)
    out_dir.mkdir(parents=True, exist_ok=True)
    check_output_dir(out_dir, settings, resume)
    (out_dir / CONFIG_JSON).write_text(json.dumps(settings.model_dump(), indent=2) + "\n", encoding="utf-8")
    log, done = open_log(out_dir / SAMPLES_JSONL)
    outcomes: dict[SampleKey, SampleOutcome] = dict(done)
    tasks = pending_tasks(benchmarks, settings.n, done)
    finished = done_in(benchmarks, settings.n, done)
    progress = RunProgress(total=len(tasks) + len(finished), finished=finished, enabled=show_progress)

    def record(sample: SampleRecord) -> None:
        log.append(sample)
        outcomes[sample.key] = SampleOutcome.model_validate(sample.model_dump(exclude={"response"}))
        progress.update(sample.correct)

    own_reward = reward is None
    reward = reward or Grader(workers=1)
    try:
        await run_tasks(tasks, solve, reward, settings.concurrency, record)
    finally:
        progress.close()
        log.close()
        if own_reward:
            reward.close()
    document = build_results(benchmarks, outcomes, settings.model_dump(), settings.n)
    write_reports(out_dir, document)
    return document


def done_in(benchmarks: Iterable[Benchmark], n: int, done: Mapping[SampleKey, SampleOutcome]) -> list[SampleOutcome]:
    """The finished samples that belong to this run's work (not those of a larger earlier one)."""
    keys = (SampleTask(b, p, i).key for b in benchmarks for p in b.problems for i in range(n))
    return [done[key] for key in keys if key in done]
