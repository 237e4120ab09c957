"""The scheduling policies a ``Scheduler`` runs (``engine.scheduler``).

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

from rstar2.fleet.books import Policy


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
