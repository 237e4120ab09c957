"""The sampling half of a training step: a batch of problems in, graded rollout groups out.

    sampler = Sampler(engine, tokenizer, code_runner, grader, rollout, rollouts_per_prompt=8)
    batch = await sampler.sample(problems, seed)     # batch.groups[i][j], batch.timings

Every problem gets ``rollouts_per_prompt`` trajectories through the agent loop, all in flight
at once (the engine batches them); the agent runs them under ``rollout``, the run's
``rollout:`` section as it is (``rstar2.agent.rollout.RolloutConfig``). Tool calls go through a ``TimedRunner``, so the step can
report the wall time during which the sandbox was busy. Grading is streamed: each trajectory
is handed to a ``GradeStream`` the moment it ends, and the stream sends everything that ended
while its previous batch was grading to the grader as one ``grade_many`` call, so grading
overlaps the rollouts still generating and each call gives a parallel grader (one with many
worker processes) as many pairs as have ended, instead of one pair at a time. A run with its
own reward function (``rl.reward``) hands the sampler a ``CustomReward`` instead, whose calls
go to its worker pool one by one as rollouts end, with the problem's source row; either way
each rollout carries its ``Score``, failures included, for the step's metrics.

Seeds: rollout ``k`` of problem ``i`` samples from its own stream ``derive_seed(seed, i, k)``
(``SamplingParams.seed`` on every turn), so which tokens it draws does not depend on the order
in which requests reach the engine, on what is batched beside it, or on which fleet member
runs it (arrival order follows the sandbox's wall-clock timing and differs between runs). The
engine is also reseeded with ``seed`` (``TrainableEngine.reseed``) for anything unseeded.
A resumed step samples as the interrupted one did, up to the numerics of batching (a logit
that moves by a rounding error can move a draw across a token boundary).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from rstar2.agent.rollout import Agent, CodeRunner, RolloutConfig
from rstar2.data.problems import Problem
from rstar2.engines.base import TrainableEngine
from rstar2.engines.seeds import derive_seed
from rstar2.reward import CustomReward, Grade, Grader, Score
from rstar2.rl.metrics import Rollout
from rstar2.rl.roc import trajectory_facts
from rstar2.rl.timing import TimedRunner


@dataclass(frozen=True)
class SampledBatch:
    """A step's graded rollouts and the wall seconds of its sampling phases."""

    groups: list[list[Rollout]]
    """One group per problem, in the order given, each with ``rollouts_per_prompt`` rollouts."""
    timings: dict[str, float]
    """``rollout`` (until the last trajectory ended), ``tools`` (sandbox busy) and ``reward``
    (the grading left after the last trajectory ended)."""


class GradeStream:
    """Grades (response, gold) pairs as they arrive, batching those that arrive together.

    One batch is with the grader at a time (in a thread, so the event loop keeps running the
    rollouts); pairs that arrive meanwhile wait and form the next batch. A grader failure (a
    closed pool) fails the pairs of that batch, not the stream."""

    def __init__(self, grader: Grader):
        self.grader = grader
        self.waiting: list[tuple[tuple[str, str], asyncio.Future]] = []
        self.sender: asyncio.Task | None = None

    async def grade(self, response: str, gold: str) -> Grade:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(((response, gold), future))
        if self.sender is None or self.sender.done():
            self.sender = asyncio.create_task(self.send_batches())
        return await future

    async def send_batches(self) -> None:
        while self.waiting:
            batch, self.waiting = self.waiting, []
            try:
                grades = await asyncio.to_thread(self.grader.grade_many, [pair for pair, _ in batch])
            except Exception as error:  # noqa: BLE001 -- handed to every waiting rollout
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            for (_, future), grade in zip(batch, grades):
                if not future.done():
                    future.set_result(grade)


class Sampler:
    """Rollouts of a batch of problems through the agent loop, graded as each one ends."""

    def __init__(self, engine: TrainableEngine, tokenizer, code_runner: CodeRunner | None,
                 grader: Grader | CustomReward, rollout: RolloutConfig, rollouts_per_prompt: int):
        self.engine = engine
        self.tokenizer = tokenizer  # the one the trajectories' token ids belong to
        self.grader = grader
        self.rollouts_per_prompt = rollouts_per_prompt
        self.tools = TimedRunner(code_runner)
        self.agent = Agent(engine, tokenizer, self.tools, rollout)

    async def sample(self, problems: Sequence[Problem], seed: int) -> SampledBatch:
        """``rollouts_per_prompt`` graded rollouts of each problem, sampled with ``seed``."""
        self.engine.reseed(seed)
        self.tools.reset()
        score = self.scorer()
        started = time.perf_counter()
        last_rollout_end = started

        async def one(problem: Problem, seed: int) -> Rollout:
            nonlocal last_rollout_end
            began = time.perf_counter()
            trajectory = await self.agent.rollout(problem.problem, seed=seed)
            ended = time.perf_counter()
            last_rollout_end = max(last_rollout_end, ended)
            scored = await score(trajectory.assistant_text, problem)
            span = (began - started, ended - started, time.perf_counter() - started)
            return Rollout(trajectory, trajectory_facts(trajectory, scored.reward), span, scored)

        n = self.rollouts_per_prompt
        groups = await asyncio.gather(*(asyncio.gather(*(one(p, derive_seed(seed, i, k)) for k in range(n)))
                                        for i, p in enumerate(problems)))
        timings = {"rollout": last_rollout_end - started, "tools": self.tools.busy_s,
                   "reward": time.perf_counter() - last_rollout_end}
        return SampledBatch([list(group) for group in groups], timings)

    def scorer(self) -> Callable[[str, Problem], Awaitable[Score]]:
        """How this step scores a response: the user's function, or the verifier's grades
        streamed in batches."""
        if isinstance(self.grader, CustomReward):
            reward = self.grader
            return lambda response, problem: reward.score(response, problem.answer, problem.row)
        grades = GradeStream(self.grader)

        async def verified(response: str, problem: Problem) -> Score:
            return verifier_score(await grades.grade(response, problem.answer))

        return verified


def verifier_score(grade: Grade) -> Score:
    """The verifier's grade as a ``Score``: a check that overran or crashed is a failure."""
    if grade.timed_out:
        return Score(grade.reward, failure="timeout", message=f"the equivalence check of {grade.pred!r:.80} overran")
    if grade.error is not None:
        return Score(grade.reward, failure="error", message=grade.error)
    return Score(grade.reward)

