"""KV accounting: what the admitted requests may come to hold, and what they hold now.

A request is admitted only when its footprint (prompt plus ``max_tokens``, within the context)
fits beside the footprints already reserved, so a running request is never preempted; one
request is always admitted into an idle engine, whatever its footprint. What the active
sequences hold after each step (and the most they ever held) is what ``HFEngine.load``
reports to a fleet's scheduler.
"""

from __future__ import annotations

import collections

from rstar2.engines.hf.requests import Request, Resident


class KVBudget:
    """The engine's KV tokens: capacity, reserved, used and peak."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.reserved = 0  # footprints of the admitted requests
        self.used = self.peak = 0  # tokens held by active sequences (the last step)

    def admissible(self, queue: collections.deque[Request], active: int, max_batch_size: int
                   ) -> list[Request]:
        """Take queued requests, in order, while a batch row and their KV footprint are free."""
        admitted: list[Request] = []
        while queue and active + len(admitted) < max_batch_size:
            request = queue[0]
            if request.future.cancelled():
                queue.popleft()
                continue
            busy = active or admitted
            if busy and self.reserved + request.footprint > self.capacity:
                break
            admitted.append(queue.popleft())
            self.reserved += request.footprint
        return admitted

    def release(self, request: Request) -> None:
        """A request has finished: its footprint is free again."""
        self.reserved -= request.footprint

    def measure(self, active: list[Resident]) -> None:
        """What the active sequences hold after a step."""
        self.used = sum(len(r.cached) + len(r.pending) for r in active)
        self.peak = max(self.peak, self.used)

    def reset(self) -> None:
        """Every admitted request has failed: nothing is reserved."""
        self.reserved = 0
