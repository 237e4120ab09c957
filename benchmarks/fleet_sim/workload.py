"""What one rollout step asks of the engines: trajectories and their tool calls.

Lengths are heavy-tailed and correlated within a prompt's group, as in GRPO rollouts (Seer,
arXiv 2511.14617, builds its scheduler on that correlation): each prompt draws a typical
length from a log-normal of spread ``group_sigma``, and each of its rollouts a length around it
(``rollout_sigma``), capped at the response budget. Tool calls are Poisson per rollout, each
answered after a log-normal service time (a long tail: most calls return fast, a few run to
the timeout) on a sandbox of ``tool_workers`` workers shared by the whole fleet (calls queue
when all are busy; 0 means no contention).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Workload:
    prompts: int = 512
    rollouts_per_prompt: int = 32
    prompt_tokens: int = 600
    max_response_tokens: int = 8192
    median_response_tokens: float = 1500.0
    group_sigma: float = 0.6  # spread of the prompts' typical lengths (log scale)
    rollout_sigma: float = 0.55  # spread of the rollouts of one prompt around it
    tool_calls_mean: float = 2.7
    max_turns: int = 10
    tool_response_tokens: int = 80
    tool_median_s: float = 0.3
    tool_sigma: float = 1.0  # log-normal service time: the long tail
    tool_timeout_s: float = 4.0
    tool_workers: int = 0
    seed: int = 0


@dataclass(eq=False)
class Trajectory:
    key: int
    group: int
    prompt_tokens: int
    segments: list[int]  # tokens generated in each turn
    tool_tokens: int
    budget: int
    turn: int = 0
    context: int = 0  # tokens of the trajectory so far (prompt, turns, tool responses)
    member: int | None = None
    finished_at: float | None = None

    @property
    def response_tokens(self) -> int:
        return self.context - self.prompt_tokens


def draw_trajectories(w: Workload, step: int) -> list[Trajectory]:
    """The step's trajectories (seeded by the workload's seed and the step)."""
    rng = np.random.default_rng([w.seed, step])
    typical = w.median_response_tokens * np.exp(rng.normal(0.0, w.group_sigma, w.prompts))
    trajectories = []
    for group in range(w.prompts):
        lengths = typical[group] * np.exp(rng.normal(0.0, w.rollout_sigma, w.rollouts_per_prompt))
        calls = np.minimum(rng.poisson(w.tool_calls_mean, w.rollouts_per_prompt), w.max_turns - 1)
        for length, n_calls in zip(lengths, calls):
            budget = w.max_response_tokens - int(n_calls) * w.tool_response_tokens
            generated = max(int(min(length, budget)), int(n_calls) + 1)
            shares = rng.dirichlet(np.ones(int(n_calls) + 1))
            segments = np.maximum(1, np.floor(shares * generated)).astype(int).tolist()
            trajectories.append(Trajectory(len(trajectories), group, w.prompt_tokens, segments,
                                           w.tool_response_tokens, w.max_response_tokens))
    return trajectories


@dataclass
class ToolService:
    """The sandbox the fleet's tool calls share: FIFO over ``workers`` (0: unlimited)."""

    workload: Workload
    rng: np.random.Generator
    free_at: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.free_at = [0.0] * self.workload.tool_workers

    def call(self, now: float) -> float:
        """When a call made at ``now`` returns (calls arrive in time order)."""
        w = self.workload
        service = min(w.tool_timeout_s,
                      float(self.rng.lognormal(math.log(w.tool_median_s), w.tool_sigma)))
        if not self.free_at:
            return now + service
        start = max(now, heapq.heappop(self.free_at))
        heapq.heappush(self.free_at, start + service)
        return start + service

    def reset(self) -> None:
        self.free_at = [0.0] * self.workload.tool_workers
