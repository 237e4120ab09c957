"""The sampling half of a training step: a batch of problems in, graded rollout groups out.

    sampler = Sampler(engine, tokenizer, code_runner, reward, rollout, rollouts_per_prompt=8)
    batch = await sampler.sample(problems, seed)     # batch.groups[i][j], batch.timings

Every problem gets ``rollouts_per_prompt`` trajectories through the agent loop, all in flight
at once (the engine batches them); the agent runs them under ``rollout``, the run's
``rollout:`` section as it is (``rstar2.agent.rollout.RolloutConfig``). Tool calls go through a ``TimedRunner``, so the step can
report the wall time during which the sandbox was busy. Each trajectory is scored the moment
it ends, through the ``Reward`` protocol (``rstar2.reward.score_batch``) with the problem, its
gold answer and its source row, so scoring overlaps the rollouts still generating; the reward
behind it (the built-in verifier, or the run's ``rl.reward`` function) batches concurrent calls
and bounds them with its deadlines itself. Each rollout carries its ``Score``, failures
included, for the step's metrics.

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
from collections.abc import Sequence
from dataclasses import dataclass

from rstar2.agent.rollout import Agent, CodeRunner, RolloutConfig
from rstar2.data.problems import Problem
from rstar2.engines.base import TrainableEngine
from rstar2.engines.seeds import derive_seed
from rstar2.reward import Reward, RewardItem, score_batch
from rstar2.rl.roc import trajectory_facts
from rstar2.rl.rollout import Rollout
from rstar2.rl.timing import TimedRunner


@dataclass(frozen=True)
class SampledBatch:
    """A step's graded rollouts and the wall seconds of its sampling phases."""

    groups: list[list[Rollout]]
    """One group per problem, in the order given, each with ``rollouts_per_prompt`` rollouts."""
    timings: dict[str, float]
    """``rollout`` (until the last trajectory ended), ``tools`` (sandbox busy) and ``reward``
    (the grading left after the last trajectory ended)."""


class Sampler:
    """Rollouts of a batch of problems through the agent loop, graded as each one ends."""

    def __init__(self, engine: TrainableEngine, tokenizer, code_runner: CodeRunner | None,
                 reward: Reward, rollout: RolloutConfig, rollouts_per_prompt: int):
        self.engine = engine
        self.tokenizer = tokenizer  # the one the trajectories' token ids belong to
        self.reward = reward
        self.rollouts_per_prompt = rollouts_per_prompt
        self.tools = TimedRunner(code_runner)
        self.agent = Agent(engine, tokenizer, self.tools, rollout)

    async def sample(self, problems: Sequence[Problem], seed: int) -> SampledBatch:
        """``rollouts_per_prompt`` graded rollouts of each problem, sampled with ``seed``."""
        self.engine.reseed(seed)
        tools_busy = self.tools.busy_s
        started = time.perf_counter()
        last_rollout_end = started

        async def one(problem: Problem, seed: int) -> Rollout:
            nonlocal last_rollout_end
            began = time.perf_counter()
            trajectory = await self.agent.rollout(problem.problem, seed=seed, group=problem.id)
            ended = time.perf_counter()
            last_rollout_end = max(last_rollout_end, ended)
            [scored] = await score_batch(self.reward, [RewardItem(problem.problem, trajectory.assistant_text,
                                                                  problem.answer, problem.row)])
            span = (began - started, ended - started, time.perf_counter() - started)
            return Rollout(trajectory, trajectory_facts(trajectory, scored.reward), span, scored)

        n = self.rollouts_per_prompt
        groups = await asyncio.gather(*(asyncio.gather(*(one(p, derive_seed(seed, i, k)) for k in range(n)))
                                        for i, p in enumerate(problems)))
        timings = {"rollout": last_rollout_end - started, "tools": self.tools.busy_s - tools_busy,
                   "reward": time.perf_counter() - last_rollout_end}
        return SampledBatch([list(group) for group in groups], timings)
