"""Which member runs which trajectory: the scheduling policies, as plain synchronous code.

The same ``Scheduler`` object is driven by the fleet (``fleet.Fleet``, real engines, asyncio)
and by the simulator (``benchmarks/scheduler_sim.py``, simulated engines, a discrete-event
clock), so what the simulator measures is the policy the fleet runs. It keeps the books and
decides; it never waits, computes or talks to an engine.

The unit is a trajectory -- all turns of one rollout -- not a request: it is admitted once,
stays pinned to its member for every turn (the member keeps its prefix cached), and its
reservation is released when it ends, fails or its member is lost.

Policies (``rollout.scheduler``):

* ``static`` -- trajectories are dealt round-robin to the members as they are submitted, all at
  once (the batch split evenly up front: verl v0.2's default, the paper's baseline);
* ``least_loaded`` -- each new trajectory goes at once to the member with the fewest
  trajectories in flight (verl's ``GlobalRequestLoadBalancer``, sticky per trajectory);
* ``kv_aware`` -- the paper's (§3.2): trajectories wait in a pending pool and one is admitted
  to the member with the most free KV when that free KV fits its prompt plus its whole
  response budget (so a member holds K ~ free KV / L of them and never overflows); admission
  happens again the moment a release frees capacity. The reservation holds while the
  trajectory waits on a tool: its KV must still be there for the next turn.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Hashable, Literal

PolicyName = Literal["static", "least_loaded", "kv_aware"]
POLICIES: tuple[str, ...] = ("static", "least_loaded", "kv_aware")


@dataclass
class MemberBooks:
    """What the scheduler knows of one member."""

    capacity_tokens: int  # KV the member can hold, as it reports
    reported_used_tokens: int = 0  # KV it reports held (outside clients' requests included)
    reserved_tokens: int = 0  # KV reserved by the trajectories pinned here
    trajectories: set = field(default_factory=set)
    alive: bool = True

    @property
    def free_tokens(self) -> int:
        return self.capacity_tokens - max(self.reserved_tokens, self.reported_used_tokens)


class Scheduler:
    """Pending pool, pins and reservations of one policy over a list of members."""

    def __init__(self, policy: PolicyName, capacities: list[int]):
        if policy not in POLICIES:
            raise ValueError(f"unknown scheduler {policy!r}; choose one of {', '.join(POLICIES)}")
        if not capacities:
            raise ValueError("a fleet needs at least one member")
        self.policy = policy
        self.members = [MemberBooks(c) for c in capacities]
        self.pending: collections.OrderedDict[Hashable, int] = collections.OrderedDict()
        self.pinned: dict[Hashable, tuple[int, int]] = {}  # trajectory -> (member, reserved)
        self.dealt = 0  # round-robin position of ``static``

    # ----------------------------------------------------------------- the books
    def submit(self, trajectory: Hashable, need_tokens: int) -> None:
        """A new trajectory needing ``need_tokens`` of KV (prompt + response budget)."""
        if trajectory in self.pending or trajectory in self.pinned:
            raise ValueError(f"trajectory {trajectory!r} is already scheduled")
        self.pending[trajectory] = need_tokens

    def admit(self) -> list[tuple[Hashable, int]]:
        """Pin every pending trajectory the policy admits now; returns (trajectory, member)."""
        admitted = []
        while self.pending:
            trajectory, need = next(iter(self.pending.items()))
            member = self.choose(need)
            if member is None:
                break  # first come, first served: nothing overtakes the head of the pool
            del self.pending[trajectory]
            self.pin(trajectory, member, need)
            admitted.append((trajectory, member))
        return admitted

    def release(self, trajectory: Hashable) -> None:
        """The trajectory ended or failed: free its reservation (no-op if not scheduled)."""
        self.pending.pop(trajectory, None)
        pin = self.pinned.pop(trajectory, None)
        if pin is not None:
            member, reserved = pin
            self.members[member].reserved_tokens -= reserved
            self.members[member].trajectories.discard(trajectory)

    def member_of(self, trajectory: Hashable) -> int | None:
        pin = self.pinned.get(trajectory)
        return None if pin is None else pin[0]

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

    def report(self, member: int, capacity_tokens: int, used_tokens: int) -> None:
        """The member's own reading of its KV (from its counters or ``/metrics``)."""
        books = self.members[member]
        books.capacity_tokens, books.reported_used_tokens = capacity_tokens, used_tokens

    # ----------------------------------------------------------------- the policies
    def choose(self, need: int) -> int | None:
        """The member for a trajectory needing ``need`` tokens, or None to keep it pending."""
        alive = [i for i, m in enumerate(self.members) if m.alive]
        if not alive:
            return None
        if self.policy == "static":
            self.dealt += 1
            return alive[(self.dealt - 1) % len(alive)]
        if self.policy == "least_loaded":
            return min(alive, key=lambda i: len(self.members[i].trajectories))
        best = max(alive, key=lambda i: self.members[i].free_tokens)
        books = self.members[best]
        fits = books.free_tokens >= min(need, books.capacity_tokens)  # an oversize one runs alone
        return best if fits else None

    def pin(self, trajectory: Hashable, member: int, need: int) -> None:
        books = self.members[member]
        reserved = min(need, books.capacity_tokens)
        books.reserved_tokens += reserved
        books.trajectories.add(trajectory)
        self.pinned[trajectory] = (member, reserved)
