"""How long a running trajectory will still grow, learned from the rollouts that ended.

Rollouts of one prompt have similar lengths (Seer, arXiv 2511.14617, schedules on it), so a
trajectory is predicted from its own group once ``min_group`` of the group's rollouts have
ended, and from the recent rollouts of every group (this step and earlier ones, the latest
``history``; the lengths of the latest ``groups`` groups are kept) until then. A prediction is conditional on what the trajectory already holds: of
the lengths seen, only those longer than its response so far count (a trajectory that has
outlived every one of them is expected to grow as much again). Lengths are response tokens:
everything after the prompt, tool responses included, as the response budget counts them.

``survival`` returns the chance that a trajectory is still growing after ``tau`` more tokens
for each ``tau`` of a grid, what the adaptive policy folds into each member's predicted peak
KV; with no rollout ended yet there is nothing to predict from and it returns None.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Hashable, Sequence


class LengthModel:
    def __init__(self, history: int = 4096, min_group: int = 2, groups: int = 4096):
        self.min_group, self.max_groups = min_group, groups
        self.recent: collections.deque[int] = collections.deque(maxlen=history)
        self.ordered: list[int] = []  # ``recent``, sorted
        self.groups: collections.OrderedDict[Hashable, list[int]] = collections.OrderedDict()

    def record(self, group: Hashable, response_tokens: int) -> None:
        """A rollout of ``group`` ended with ``response_tokens``."""
        if len(self.recent) == self.recent.maxlen:
            del self.ordered[bisect.bisect_left(self.ordered, self.recent[0])]
        self.recent.append(response_tokens)
        bisect.insort(self.ordered, response_tokens)
        bisect.insort(self.groups.setdefault(group, []), response_tokens)
        self.groups.move_to_end(group)
        if len(self.groups) > self.max_groups:  # the groups of steps long past
            self.groups.popitem(last=False)

    def samples(self, group: Hashable) -> list[int]:
        own = self.groups.get(group, ())
        return own if len(own) >= self.min_group else self.ordered

    def expected(self, group: Hashable, so_far: int = 0) -> float | None:
        """Expected final response length given ``so_far`` (None: nothing ended yet)."""
        lengths = self.samples(group)
        if not lengths:
            return None
        longer = lengths[bisect.bisect_right(lengths, so_far):]
        if not longer:
            return 2.0 * so_far
        return sum(longer) / len(longer)

    def survival(self, group: Hashable, so_far: int, grid: Sequence[int]) -> list[float] | None:
        """P(still growing after ``tau`` more tokens | grown ``so_far``) for each ``tau``."""
        lengths = self.samples(group)
        if not lengths:
            return None
        start = bisect.bisect_right(lengths, so_far)
        alive = len(lengths) - start
        if alive == 0:  # beyond every length seen: expect it to grow as much again
            return [1.0 if tau < max(so_far, 1) else 0.0 for tau in grid]
        return [(len(lengths) - bisect.bisect_right(lengths, so_far + tau)) / alive
                for tau in grid]
