"""When a run has stopped learning, and the error it ends with.

    watch = SilenceWatch(limit)                # rl.max_silent_steps, or the trainer's default
    watch.record(trained, scores)              # after every step
    if watch.reached():
        raise watch.verdict(step, steps, run_dir, reward)

Two streaks end a run: steps in a row that trained nothing (every group's rollouts scored
alike, so no update ran and the policy did not change), and steps in a row whose reward calls
all failed (every rollout scored 0 for the reward's sake, not the policy's: a run can keep
updating on such rewards, with ``rl.roc.drop_zero_variance: false``, and still learn nothing).
Either streak reaching the limit is the run's failure, however many steps it ran:
``NothingLearned`` says which streak, the first reward failure when there was one, and where
the model of the last step is. The trainer checkpoints that step and raises it; the run's
wiring (``rstar2.run.training``) exports the model and lets it go on, and ``rstar2 train`` and
``rstar2 demo`` turn it into one ``error:`` line and exit code 1.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rstar2.errors import Rstar2Error
from rstar2.reward import Score


class NothingLearned(Rstar2Error, RuntimeError):
    """The run stopped because it learned nothing for ``rl.max_silent_steps`` steps."""

    exit_code = 1  # it ran, and failed: not a refusal of its input

    def __init__(self, why: str, step: int, checkpoints: Path):
        super().__init__(why)
        self.why = why
        self.step = step
        self.checkpoints = checkpoints
        self.exported: Path | None = None
        """The model directory the run exported after stopping, once it has."""

    def __str__(self) -> str:
        where = (f"{self.exported} (its checkpoint, for --resume, in {self.checkpoints})" if self.exported
                 else f"its checkpoint in {self.checkpoints}")
        return f"{self.why}. The model of step {self.step} is saved: {where}"


@dataclass
class SilenceWatch:
    """The two streaks of the module docstring, and the reward calls of the last steps."""

    limit: int
    silent: int = 0
    """Steps in a row without an update."""
    failing: int = 0
    """Steps in a row whose every reward call failed."""
    recent: deque[list[Score]] = field(default_factory=deque)
    """The reward calls of each of the last ``limit`` steps, oldest first."""

    def record(self, trained: bool, scores: Sequence[Score]) -> None:
        """Count one step: whether it updated the policy, and its reward calls."""
        all_failed = bool(scores) and all(scored.failure is not None for scored in scores)
        self.silent = 0 if trained else self.silent + 1
        self.failing = self.failing + 1 if all_failed else 0
        self.recent.append(list(scores))
        if len(self.recent) > self.limit:
            self.recent.popleft()

    def reached(self) -> bool:
        return max(self.silent, self.failing) >= self.limit

    def verdict(self, step: int, steps: int, run_dir: Path, reward: str | None) -> NothingLearned:
        """Why the run stopped after ``step`` of ``steps``, for the streak that reached the
        limit; ``reward`` is ``rl.reward`` (None: the built-in verifier)."""
        streak = min(max(self.silent, self.failing), self.limit)
        calls = [scored for scores in list(self.recent)[-streak:] for scored in scores]
        failures = [scored for scored in calls if scored.failure is not None]
        first = f"{failures[0].failure}: {failures[0].message}" if failures else ""
        head = f"stopped after step {step} of {steps}, a failed run: "
        tail = f"rl.max_silent_steps ({self.limit}) sets this limit"
        if self.failing >= self.limit:
            named = f"the reward function {reward}" if reward else "the built-in verifier"
            why = (f"every reward call of the last {streak} steps failed ({len(failures)} of {len(calls)}, each "
                   f"scored 0), so nothing could be learned; the first: {first}. Fix {named} (docs/reward.md); "
                   f"{tail}")
        else:
            failed = (f", and {len(failures)} of their {len(calls)} reward calls failed and scored 0 (the first: "
                      f"{first})" if failures else "")
            rewards = {scored.reward for scored in calls}
            alike = f"every rollout scored {rewards.pop():g}" if len(rewards) == 1 else "every group's rollouts scored alike"
            why = (f"the last {streak} steps trained nothing: {alike}, so the policy did not change{failed}. "
                   f"Usually a collapsed policy (the same answer to everything: see "
                   f"{run_dir / 'rollouts' / f'step_{step}.jsonl'}; a lower rl.optimizer.lr) or problems out of "
                   f"its reach or already mastered (rstar2 data difficulty-filter); {tail}")
        return NothingLearned(head + why, step, run_dir / "checkpoints")
