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

The policies are in ``policies`` and ``adaptive``; ``POLICY_CLASSES`` names them, and the
``engine.scheduler`` vocabulary (``PolicyName``) is read from it.
"""

from __future__ import annotations

import collections
from typing import Hashable, Literal

from rstar2.engines.base import EngineLoad
from rstar2.fleet.adaptive import Adaptive
from rstar2.fleet.books import MemberBooks, Policy, TrajectoryBooks
from rstar2.fleet.policies import KVAware, LeastLoaded, Static

POLICY_CLASSES: dict[str, type[Policy]] = {
    "static": Static, "least_loaded": LeastLoaded, "kv_aware": KVAware, "adaptive": Adaptive}
"""Every scheduling policy by its name in recipes (``engine.scheduler``)."""
POLICIES: tuple[str, ...] = tuple(POLICY_CLASSES)
PolicyName = Literal[POLICIES]  # the recipe field's type, read from the registry


def make_policy(name: str) -> Policy:
    if name not in POLICY_CLASSES:
        raise ValueError(f"unknown scheduler {name!r}; choose one of {', '.join(POLICIES)}")
    return POLICY_CLASSES[name]()


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
