"""What a scheduler knows of its members and trajectories, and what a policy decides.

``Policy`` is the interface every scheduling policy implements; it reads and updates the
``Scheduler``'s books (``MemberBooks``, ``TrajectoryBooks``) and never imports the scheduler,
which builds the policies: the books sit below both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Hashable

from rstar2.engines.base import EngineLoad

if TYPE_CHECKING:
    from rstar2.fleet.scheduler import Scheduler


@dataclass
class MemberBooks:
    """What the scheduler knows of one member."""

    capacity_tokens: int  # KV the member can hold, as it reports
    reported_used_tokens: int = 0  # KV it reports held (outside clients' requests included)
    reserved_tokens: int = 0  # KV booked by the trajectories pinned here
    trajectories: set = field(default_factory=set)
    alive: bool = True
    reading: EngineLoad | None = None  # its latest reading

    @property
    def free_tokens(self) -> int:
        return self.capacity_tokens - max(self.reserved_tokens, self.reported_used_tokens)


@dataclass(eq=False)
class TrajectoryBooks:
    """What the scheduler knows of one trajectory."""

    key: Hashable
    need_tokens: int  # prompt + response budget: the most it can come to hold
    prompt_tokens: int
    group: Hashable
    context_tokens: int  # tokens so far, as of its last turn boundary
    member: int | None = None
    reserved: int = 0  # booked on its member now
    in_tool: bool = False  # between two turns
    moves: int = 0

    @property
    def response_tokens(self) -> int:
        return self.context_tokens - self.prompt_tokens


class Policy:
    """The decisions of one scheduling policy; the base never moves a trajectory and books
    the trajectory's whole need (capped at its member's capacity)."""

    def next_pending(self, scheduler: Scheduler) -> TrajectoryBooks:
        """The pending trajectory to try next (first come, first served)."""
        return next(iter(scheduler.pending.values()))

    def choose(self, scheduler: Scheduler, trajectory: TrajectoryBooks) -> int | None:
        """The member to admit ``trajectory`` to, or None to keep it (and those after it)
        pending."""
        raise NotImplementedError

    def submitted(self, scheduler: Scheduler, trajectory: TrajectoryBooks) -> None:
        """A trajectory joined the pool."""

    def book(self, scheduler: Scheduler, trajectory: TrajectoryBooks) -> int:
        """Book ``trajectory`` on its member as it is now; returns the KV tokens booked."""
        return min(trajectory.need_tokens, scheduler.members[trajectory.member].capacity_tokens)

    def unbook(self, scheduler: Scheduler, trajectory: TrajectoryBooks) -> None:
        """Take back what ``book`` booked (before a change, a move or the end)."""

    def place_turn(self, scheduler: Scheduler, trajectory: TrajectoryBooks) -> int:
        """The member for the trajectory's next turn (its own, unless the policy moves it)."""
        return trajectory.member

    def observe(self, scheduler: Scheduler, member: int, load: EngineLoad) -> None:
        """A member's reading arrived."""

    def ended(self, scheduler: Scheduler, trajectory: TrajectoryBooks) -> None:
        """A trajectory finished (not failed) with ``trajectory.context_tokens``."""
