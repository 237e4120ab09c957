"""``adaptive``: the fleet's default scheduling policy.

Real engines already admit what fits their KV and preempt when it runs out (SGLang retracts
one request at a time, vLLM preempts the newest); a fleet that holds trajectories back on a
worst-case reservation only idles them (``kv_aware``). So this policy deals trajectories as
``least_loaded`` does, and departs from it where measurements say it should:

* **Placement by measured speed.** Each member's decode speed is the inter-token latency it
  reports (``EngineLoad.inter_token_seconds`` / ``inter_tokens``: vLLM's histogram, served by
  ``rstar2 serve-model`` too), fitted as one fleet-wide shape over the number of running
  sequences times a factor per member (``SpeedModel``). A member slower than the median by
  more than ``SAME_SPEED`` counts as slow: it gets trajectories in proportion to its speed
  (fewest ``slowness x trajectories`` first); members of one speed are dealt evenly.
* **Moves at a tool-call boundary.** When a trajectory on a slow member starts its next turn
  and a member at least ``MOVE_GAIN`` faster has room, it moves there if its expected remaining
  tokens decode sooner there, counting the re-prefill of its whole context (each turn sends the
  whole context anyway). The slow member keeps the first turns and the short work.
* **Admission by predicted peak KV.** Each trajectory books a curve: its KV after ``tau``
  more tokens, ``(context + tau) * P(still growing)``, from the lengths of rollouts that ended
  (``lengths.LengthModel``: its own prompt group's once two of them ended, recent rollouts of
  every group before that; the spread of those lengths is in the curve, not a worst case). A
  member's curves add up to its predicted KV over the coming tokens; a trajectory is admitted
  where that sum's peak, its own curve included, stays under the member's fill target, and
  otherwise waits in the pool for the least loaded member to have room.
* **A booking that shrinks during a tool wait.** Between two turns a trajectory books only the
  context it holds (the engine keeps it as evictable prefix cache); its growth is booked again
  when its next turn starts.
* **A fill target per member, steered by its preemption counter and kept across steps.** It
  starts at ``FILL_MAX`` times the capacity, where the curves never hold anything back (and
  before any rollout has ended there are no curves: the first step is dealt as
  ``least_loaded`` deals it). A reading in which the member preempted more than ``STORM`` of
  its running requests -- its own admission failing, as in a thrashing engine -- lowers it;
  a reading with KV to spare while the curves hold the member back raises it again.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rstar2.engines.base import EngineLoad
from rstar2.fleet.books import Policy, TrajectoryBooks
from rstar2.fleet.lengths import LengthModel

if TYPE_CHECKING:
    from rstar2.fleet.scheduler import Scheduler

GRID = np.array([0, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
                 12288, 16384, 24576, 32768, 65536])
SAME_SPEED = 1.25  # members within this factor of the median speed count as equally fast
MOVE_GAIN = 1.25  # a move must make the remaining decode this much faster
PREFILL_PER_DECODE = 0.05  # a prefilled token costs at most this share of a decode step
FILL_MIN, FILL_MAX = 0.25, 3.0
FILL_DOWN, FILL_UP = 0.85, 1.05  # per reading with new preemptions / predicted full yet room
ROOM = 0.9  # a member using less than this share of its KV has room to spare
STORM = 0.25  # preempting this share of its running requests between two readings
BALANCE = 2.0  # a member may take work while at most this many above the lightest
HELD = 0.9  # a member whose predicted peak is this close to its fill target is held by it


class SpeedModel:
    """Each member's decode speed, as one shape for the fleet and a factor per member.

    A sequence's inter-token latency on member ``m`` running ``n`` sequences is modelled as
    ``level[m] * (1 + slope * n)``: the slope (>= 0) is the fleet's (one model, one kind of
    engine), the level is the member's (a slower GPU, a busier host). The slope is read only
    from how each member's own latency moves with its own load -- two members read at
    different loads (a fast one idle between readings, a slow one always busy) would
    otherwise pass for one speed at two loads -- as the median of what each pair of one
    member's readings implies (Theil-Sen), so that one noisy reading does not swing it. A
    member's level over the (lower) median level is its slowness."""

    MAX_SLOPE = 10.0  # per running sequence, relative to a lone one

    def __init__(self, history: int = 64):
        self.readings: dict[int, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=history))
        self.factors: dict[int, float] = {}

    def add(self, member: int, running: float, seconds: float) -> None:
        self.readings[member].append((running, seconds))

    def slope(self, rows: list[np.ndarray]) -> float:
        """The median slope over pairs of one member's readings at different loads (0 where
        no member was read at two loads)."""
        slopes = []
        for member_rows in rows:
            running, seconds = member_rows[np.argsort(member_rows[:, 0], kind="stable")].T
            low, high = np.triu_indices(len(running), k=1)  # running[low] <= running[high]
            apart = running[high] - running[low] > 1e-9
            low, high = low[apart], high[apart]
            ratio = seconds[high] / seconds[low]
            denominator = running[high] - ratio * running[low]  # <= 0: faster than proportional
            slopes.append(np.where(denominator > 0, (ratio - 1) / np.maximum(denominator, 1e-12),
                                   self.MAX_SLOPE))
        pairs = np.concatenate(slopes) if slopes else np.zeros(0)
        return float(np.clip(np.median(pairs), 0.0, self.MAX_SLOPE)) if len(pairs) else 0.0

    def fit(self) -> None:
        members = [m for m, rows in self.readings.items() if rows]
        rows = [np.array(self.readings[m]) for m in members]
        slope = self.slope(rows)
        levels = np.array([np.median(r[:, 1] / (1 + slope * r[:, 0])) for r in rows])
        levels /= np.sort(levels)[(len(levels) - 1) // 2]  # lower median: of two, the faster
        self.factors = dict(zip(members, levels.tolist()))


@dataclass
class MemberState:
    fill: float = FILL_MAX  # its fill target, in capacities
    last: EngineLoad | None = None  # its latest reading


class Adaptive(Policy):
    def __init__(self):
        self.lengths = LengthModel()
        self.states: dict[int, MemberState] = collections.defaultdict(MemberState)
        self.profiles = np.zeros((0, len(GRID)))  # predicted KV curve per member
        self.curves: dict[object, np.ndarray] = {}  # each booked trajectory's curve
        self.speed = SpeedModel()
        self.readings = 0  # since the speed model was last fitted

    # ----------------------------------------------------------------- curves
    def curve(self, trajectory: TrajectoryBooks) -> np.ndarray:
        """Its predicted KV after each ``GRID`` more tokens (nothing before any rollout
        ended: then the members' own admission decides, as under static assignment)."""
        context = trajectory.context_tokens
        survival = self.lengths.survival(trajectory.group, trajectory.response_tokens, GRID)
        if survival is None:
            return np.zeros(len(GRID))
        if trajectory.in_tool:
            return np.full(len(GRID), float(context))
        return (context + GRID) * np.asarray(survival)

    def profile(self, scheduler: Scheduler, member: int) -> np.ndarray:
        if len(self.profiles) < len(scheduler.members):
            grown = np.zeros((len(scheduler.members), len(GRID)))
            grown[: len(self.profiles)] = self.profiles
            self.profiles = grown
        return self.profiles[member]

    def book(self, scheduler, trajectory):
        curve = self.curve(trajectory)
        self.profile(scheduler, trajectory.member)
        self.profiles[trajectory.member] += curve
        self.curves[trajectory.key] = curve
        return int(curve.max())

    def unbook(self, scheduler, trajectory):
        curve = self.curves.pop(trajectory.key, None)
        if curve is not None:
            self.profiles[trajectory.member] -= curve

    def fits(self, scheduler: Scheduler, member: int, curve: np.ndarray) -> bool:
        books = scheduler.members[member]
        if not books.trajectories:
            return True  # an empty member takes anything (an oversize one runs alone)
        limit = self.states[member].fill * books.capacity_tokens
        return float((self.profile(scheduler, member) + curve).max()) <= limit

    # ----------------------------------------------------------------- placement
    def slowness(self, member: int) -> float:
        """The member's decode time over the median member's at the same load (1 within
        ``SAME_SPEED``, and where nothing was measured)."""
        factor = self.speed.factors.get(member, 1.0)
        return 1.0 if 1 / SAME_SPEED < factor < SAME_SPEED else factor

    def choose(self, scheduler, trajectory):
        """The least loaded member (its trajectories times its slowness) if the trajectory's
        curve fits there, else the next least loaded within ``BALANCE``; None (wait)
        otherwise: handing it to a busier member that happens to have room piles work where
        a tail then forms."""
        alive = scheduler.alive()
        if not alive:
            return None
        load = {i: self.slowness(i) * (len(scheduler.members[i].trajectories) + 1) for i in alive}
        lightest = min(load.values())
        curve = self.curve(trajectory)
        for member in sorted(alive, key=load.get):
            if load[member] > lightest + BALANCE:
                return None
            if self.fits(scheduler, member, curve):
                return member
        return None

    def place_turn(self, scheduler, trajectory):
        """Stay, unless the member is slow and one at least ``MOVE_GAIN`` faster has room:
        then the one where the remaining tokens (and the re-prefill) finish first. Speeds
        are compared as measured at the fleet's median load, since a long remainder runs
        mostly after today's load has drained."""
        here = trajectory.member
        if self.slowness(here) <= 1.0:
            return here
        remaining = self.remaining(trajectory)
        curve = self.curve(trajectory)
        best, best_time = here, remaining * self.slowness(here)
        for member in scheduler.alive():
            if member == here or self.slowness(member) * MOVE_GAIN > self.slowness(here):
                continue
            if not self.fits(scheduler, member, curve):
                continue
            time = (remaining + PREFILL_PER_DECODE * trajectory.context_tokens) * self.slowness(member)
            if (time, len(scheduler.members[member].trajectories)) < (
                    best_time, len(scheduler.members[best].trajectories)):
                best, best_time = member, time
        return best

    def remaining(self, trajectory: TrajectoryBooks) -> float:
        """Expected response tokens still to come (as many again as so far, with nothing
        learnt yet)."""
        so_far = trajectory.response_tokens
        expected = self.lengths.expected(trajectory.group, so_far)
        return max(1.0, (expected - so_far) if expected is not None else float(so_far))

    # ----------------------------------------------------------------- readings
    def observe(self, scheduler, member, load):
        state = self.states[member]
        last, state.last = state.last, load
        if last is None:
            return
        capacity = load.kv_capacity_tokens
        if load.preemptions - last.preemptions > STORM * max(1, last.running):
            state.fill = max(FILL_MIN, state.fill * FILL_DOWN)
        elif (load.kv_used_tokens < ROOM * capacity
              and self.profile(scheduler, member).max() >= HELD * state.fill * capacity):
            state.fill = min(FILL_MAX, state.fill * FILL_UP)  # predicted full, yet room
        tokens = load.inter_tokens - last.inter_tokens
        if tokens > 0:
            seconds = (load.inter_token_seconds - last.inter_token_seconds) / tokens
            self.speed.add(member, (load.running + last.running) / 2, seconds)
            self.readings += 1
            if self.readings >= len(scheduler.members):
                self.readings = 0
                self.speed.fit()

    def ended(self, scheduler, trajectory):
        self.lengths.record(trajectory.group, trajectory.response_tokens)
