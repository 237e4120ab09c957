"""A sampled rollout: what the sampler hands a training step for each trajectory it ran.

The step's metrics, RoC's facts, the viewer's rows and validation all read it, so it lives
apart from any one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rstar2.agent.trajectory import Trajectory
from rstar2.reward import Score
from rstar2.rl.roc import RolloutSummary


@dataclass(frozen=True)
class Rollout:
    """One sampled rollout with what the step learned about it."""

    trajectory: Trajectory
    facts: RolloutSummary
    span_s: tuple[float, float, float] | None = None
    """Seconds after the step's sampling began at which the rollout started, ended and was
    graded (the viewer's timeline); None where nobody timed it."""
    score: Score | None = None
    """The reward call's outcome (failures, a custom record's numbers); None where none was made."""
