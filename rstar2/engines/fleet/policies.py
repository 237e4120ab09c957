"""Which member runs which trajectory: the scheduling policies, as plain synchronous code.

The same ``Scheduler`` object is driven by the fleet (``fleet.Fleet``, real engines, asyncio)
and by the simulator (``benchmarks/scheduler_sim.py``, simulated engines, a discrete-event
clock), so what the simulator measures is the policy the fleet runs. It keeps the books and
decides; it never waits, computes or talks to an engine.

The unit is a trajectory -- all turns of one rollout. It is submitted when its first turn
asks to run (with its prompt, so rollouts of one prompt are known as a group), admitted to a
member once, and normally stays there for every turn (the member keeps its prefix cached); a
policy may move it to another member between two turns, while it waits on a tool (each turn
sends the whole context, so the next member prefills it again). Its booking is released when
it ends, fails or its member is lost. What the scheduler is told:

* ``submit`` / ``admit`` -- a new trajectory waits in the pool until the policy admits it;
* ``begin_turn`` / ``end_turn`` -- a turn starts (the member for it is returned) and ends
  (the trajectory now waits on a tool, or is about to end);
* ``release`` -- it ended (``finished``: its length teaches the length model) or failed;
* ``report`` -- a member's own reading of its load (``base.EngineLoad``: KV, queue,
  preemptions, decode counters), polled; ``lose`` / ``restore`` -- a member died / is back.

Policies (``engine.scheduler``):

* ``static`` -- trajectories are dealt round-robin to the members as they are submitted, all at
  once (the batch split evenly up front: verl v0.2's default, the paper's baseline);
* ``least_loaded`` -- each new trajectory goes at once to the member with the fewest
  trajectories in flight (verl's ``GlobalRequestLoadBalancer``, sticky per trajectory);
* ``kv_aware`` -- the paper's §3.2 read literally: trajectories wait in a pending pool and one
  is admitted to the member with the most free KV when that free KV fits its prompt plus its
  whole response budget, held for its whole life (a member never overflows, but holds far
  fewer trajectories than fit when responses end well below the budget);
* ``adaptive`` (the default; ``fleet.adaptive``) -- admission by each member's predicted peak
  KV from the lengths of rollouts that ended (per prompt group where its rollouts have
  ended), placement by measured member speed, a booking that shrinks while a trajectory waits
  on a tool, moves at a tool-call boundary when finishing elsewhere is faster, and a fill
  target per member steered by its preemption counter, kept across steps.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Hashable, Literal

from rstar2.engines.base import EngineLoad

PolicyName = Literal["static", "least_loaded", "kv_aware", "adaptive"]
POLICIES: tuple[str, ...] = ("static", "least_loaded", "kv_aware", "adaptive")


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


class Static(Policy):
    def __init__(self):
        self.dealt = 0  # round-robin position

    def choose(self, scheduler, trajectory):
        alive = scheduler.alive()
        if not alive:
            return None
        self.dealt += 1
        return alive[(self.dealt - 1) % len(alive)]


class LeastLoaded(Policy):
    def choose(self, scheduler, trajectory):
        alive = scheduler.alive()
        return min(alive, key=lambda i: len(scheduler.members[i].trajectories)) if alive else None


class KVAware(Policy):
    def choose(self, scheduler, trajectory):
        alive = scheduler.alive()
        if not alive:
            return None
        best = max(alive, key=lambda i: scheduler.members[i].free_tokens)
        books = scheduler.members[best]
        fits = books.free_tokens >= min(trajectory.need_tokens, books.capacity_tokens)
        return best if fits else None  # an oversize one runs alone, on an empty member


def make_policy(name: str) -> Policy:
    if name == "adaptive":
        from rstar2.engines.fleet.adaptive import Adaptive

        return Adaptive()
    policies = {"static": Static, "least_loaded": LeastLoaded, "kv_aware": KVAware}
    if name not in policies:
        raise ValueError(f"unknown scheduler {name!r}; choose one of {', '.join(POLICIES)}")
    return policies[name]()


class Scheduler:
    """Pool, pins and bookings of one policy over a list of members."""

    def __init__(self, policy: PolicyName, capacities: list[int]):
        if not capacities:
            raise ValueError("a fleet needs at least one member")
        self.policy_name = policy
        self.policy = make_policy(policy)
        self.members = [MemberBooks(c) for c in capacities]
        self.pending: collections.OrderedDict[Hashable, TrajectoryBooks] = (
            collections.OrderedDict())
        self.pinned: dict[Hashable, TrajectoryBooks] = {}
        self.moves = 0  # turns run on another member than the trajectory's previous one

    # ----------------------------------------------------------------- trajectories
    def submit(self, trajectory: Hashable, need_tokens: int, prompt_tokens: int | None = None,
               group: Hashable = None) -> None:
        """A new trajectory needing at most ``need_tokens`` of KV (prompt + response budget);
        ``group``: rollouts of the same prompt share one (None: a group of its own)."""
        if trajectory in self.pending or trajectory in self.pinned:
            raise ValueError(f"trajectory {trajectory!r} is already scheduled")
        prompt = need_tokens if prompt_tokens is None else prompt_tokens
        books = TrajectoryBooks(trajectory, need_tokens, prompt,
                                ("solo", trajectory) if group is None else group, prompt)
        self.pending[trajectory] = books
        self.policy.submitted(self, books)

    def admit(self) -> list[tuple[Hashable, int]]:
        """Pin every pending trajectory the policy admits now; returns (trajectory, member).
        Their first turn starts on that member."""
        admitted = []
        while self.pending:
            books = self.policy.next_pending(self)
            member = self.policy.choose(self, books)
            if member is None:
                break
            del self.pending[books.key]
            self.pin(books, member)
            admitted.append((books.key, member))
        return admitted

    def begin_turn(self, trajectory: Hashable, context_tokens: int) -> int:
        """A later turn of a pinned trajectory asks to run with ``context_tokens`` of context;
        returns its member for this turn (another one if the policy moves it)."""
        books = self.pinned[trajectory]
        books.context_tokens, books.in_tool = context_tokens, False
        member = self.policy.place_turn(self, books)
        if member != books.member:
            self.unbook(books)
            self.members[books.member].trajectories.discard(trajectory)
            self.members[member].trajectories.add(trajectory)
            books.member, books.moves = member, books.moves + 1
            self.moves += 1
        self.rebook(books)
        return member

    def end_turn(self, trajectory: Hashable, context_tokens: int) -> None:
        """A turn ended with ``context_tokens`` of context; the trajectory now waits on a tool
        (or is about to end)."""
        books = self.pinned.get(trajectory)
        if books is None:
            return
        books.context_tokens, books.in_tool = context_tokens, True
        self.rebook(books)

    def release(self, trajectory: Hashable, finished: bool = False) -> None:
        """The trajectory ended (``finished``) or failed: free its booking (no-op if not
        scheduled)."""
        self.pending.pop(trajectory, None)
        books = self.pinned.pop(trajectory, None)
        if books is None:
            return
        self.unbook(books)
        self.members[books.member].trajectories.discard(trajectory)
        if finished:
            self.policy.ended(self, books)

    def member_of(self, trajectory: Hashable) -> int | None:
        books = self.pinned.get(trajectory)
        return None if books is None else books.member

    def pin(self, books: TrajectoryBooks, member: int) -> None:
        books.member = member
        self.members[member].trajectories.add(books.key)
        self.pinned[books.key] = books
        self.rebook(books)

    def rebook(self, books: TrajectoryBooks) -> None:
        self.unbook(books)
        books.reserved = self.policy.book(self, books)
        self.members[books.member].reserved_tokens += books.reserved

    def unbook(self, books: TrajectoryBooks) -> None:
        self.policy.unbook(self, books)
        self.members[books.member].reserved_tokens -= books.reserved
        books.reserved = 0

    # ----------------------------------------------------------------- members
    def alive(self) -> list[int]:
        return [i for i, m in enumerate(self.members) if m.alive]

    def lose(self, member: int) -> list[Hashable]:
        """Take a dead member out; returns the trajectories pinned to it (now unscheduled:
        the caller runs them again from their start)."""
        books = self.members[member]
        books.alive = False
        lost = sorted(books.trajectories, key=str)
        for trajectory in lost:
            self.release(trajectory)
        return lost

    def restore(self, member: int, capacity_tokens: int) -> None:
        """A replaced member is back, empty."""
        self.members[member] = MemberBooks(capacity_tokens)

    def report(self, member: int, load: EngineLoad) -> None:
        """The member's own reading of its load (from its counters or ``/metrics``)."""
        books = self.members[member]
        books.capacity_tokens, books.reported_used_tokens = load.kv_capacity_tokens, load.kv_used_tokens
        books.reading = load
        self.policy.observe(self, member, load)
