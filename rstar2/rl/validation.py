"""Validation during training: the policy's greedy answers to a fixed held-out set.

    validator = Validator(greedy_sampler, problems, every_steps=4, seed=0)
    if validator.due(step, last_step):
        metrics.update(await validator())      # val/accuracy, val/problems, ...

The run's ``validation:`` section switches it on (``rstar2.run.config.ValidationConfig``). It
answers each held-out problem once, greedily, through a ``Sampler`` like training's (the same
engine, agent loop, tools and reward; ``rollouts_per_prompt`` 1 and the ``rollout:`` section at
temperature 0, built by ``rstar2.run.training.build_trainer``), so a probe measures what
training optimises, on problems it never trains on, without sampling noise: a learning curve.

The trainer asks before its first step (a fresh run's step 0), after every ``every_steps``-th
step and after the last one, with the engine holding the weights of that step; the numbers go
into that step's row of ``metrics.jsonl`` (step 0's row holds only them). Training does not see
a probe: the engine is pushed the same weights again after it (``Trainer.validate``), which
drops whatever the probe left cached (prefix blocks, parked sequences) so the next step batches
and samples exactly as it would have, and every training rollout draws from its own seeded
stream anyway (``rstar2.rl.sampler``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rstar2.data.problems import Problem
from rstar2.rl.roc import failed_share
from rstar2.rl.rollout import Rollout
from rstar2.rl.sampler import Sampler


class Validator:
    """The held-out probes of one run (module docstring)."""

    def __init__(self, sampler: Sampler, problems: Sequence[Problem], every_steps: int, seed: int):
        self.sampler = sampler
        self.problems = list(problems)
        self.every_steps = every_steps
        self.seed = seed

    def due(self, step: int, last_step: int) -> bool:
        """Whether to probe the policy of ``step`` (0: before the first)."""
        return step % self.every_steps == 0 or step == last_step

    async def __call__(self) -> dict[str, float]:
        """Answer every held-out problem once with the engine's weights; the probe's metrics."""
        started = time.perf_counter()
        batch = await self.sampler.sample(self.problems, self.seed)
        return {**validation_metrics([group[0] for group in batch.groups]),
                "time/validation": time.perf_counter() - started}


def validation_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """``val/accuracy`` (the mean reward: the share correct under the verifier),
    ``val/problems``, ``val/tool_call_rate`` (share of answers with a call),
    ``val/tool_error_ratio`` (failed calls / calls) and ``val/reward_failures`` (reward calls
    that failed and scored 0)."""
    facts = [rollout.facts for rollout in rollouts]
    n = max(len(facts), 1)
    return {
        "val/accuracy": sum(f.reward for f in facts) / n,
        "val/problems": float(len(facts)),
        "val/tool_call_rate": sum(f.tool_calls > 0 for f in facts) / n,
        "val/tool_error_ratio": failed_share(facts),
        "val/reward_failures": float(sum(r.score is not None and r.score.failure is not None for r in rollouts)),
    }
