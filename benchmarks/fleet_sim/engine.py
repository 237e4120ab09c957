"""One simulated inference engine: continuous batching, a prefix cache, and what it does when
its KV cache runs out, as the real engines do it.

Every running request gains one token per decode step. A finished turn's tokens stay in the
prefix cache, evictable (least recently used first) whenever running requests need the room;
a turn whose prefix is still cached prefills only its new tokens, otherwise its whole context
(counted as recomputed). Overflow models (``overflow``):

* ``sglang`` -- SGLang's scheduler: a waiting request is admitted when its new tokens plus
  ``min(max_new_tokens, 4096) * new_token_ratio`` fit in the free KV after the same estimate
  for every running request (``PrefillAdder``: the ratio starts at 0.7 and decays per step to
  0.7 * 0.14 over 600 steps; the per-request term is interpolated linearly between its
  admission and its budget, an approximation that keeps the books O(1)). When a decode step
  does not fit, ``retract_decode`` retracts one request at a time -- fewest output tokens
  first, longest input on ties -- until the free KV covers 20 more steps of every remaining
  request; the ratio is reset to (decoded + 20 per request) / their budgets. Retracted
  requests queue again and recompute their context. The waiting queue is ordered by longest
  cached prefix (SGLang's default ``lpm``) while it holds at most 128 requests, first come
  first served beyond.
* ``vllm`` -- vLLM v1's scheduler: a waiting request is admitted first come first served when
  its new tokens fit in free KV (no reservation for its output); when a running request cannot
  get its next slot, the newest running request is preempted -- one at a time, until it fits --
  loses its KV (recompute: it prefills its whole context again) and goes back to the front of
  the queue; nothing is admitted in a step that preempted.
* ``evict_half`` -- a stress case, not an engine: on overflow the later-admitted half of the
  running requests is evicted at once and nothing is admitted until a running turn ends.

The engine's counters are what ``/metrics`` serves: KV in use, requests running and waiting,
preemptions, generated tokens and the inter-token latency sum and count.
"""

from __future__ import annotations

import collections
import heapq
import itertools
from dataclasses import dataclass

from benchmarks.fleet_sim.steptime import StepTime
from benchmarks.fleet_sim.workload import Trajectory
from rstar2.engines.base import EngineLoad

OVERFLOW_MODELS = ("sglang", "vllm", "evict_half")
SGLANG_INIT_RATIO = 0.7
SGLANG_MIN_RATIO = 0.7 * 0.14
SGLANG_DECAY = (SGLANG_INIT_RATIO - SGLANG_MIN_RATIO) / 600
SGLANG_CLIP = 4096
RETRACT_STEPS = 20
MAX_CHUNK = 256  # re-time the decode step at least this often
LPM_LIMIT = 128


@dataclass(eq=False)
class Request:
    """One turn of a trajectory on this engine."""

    trajectory: Trajectory
    context: int  # tokens in KV when (re)admitted: prompt side, outputs so far included
    remaining: int  # tokens still to generate in this turn
    max_new: int  # the turn's token budget (SGLang's max_new_tokens)
    output: int = 0  # tokens generated in this turn so far (before the current admission)
    join_step: int = 0
    order: int = 0
    weight: float = 0.0  # SGLang reservation slope (its clipped budget / its budget)

    def generated(self, steps: int) -> int:
        return self.output + steps - self.join_step


class SimEngine:
    def __init__(self, index: int, capacity: int, speed: float, steptime: StepTime,
                 overflow: str, max_running: int = 1024):
        if overflow not in OVERFLOW_MODELS:
            raise ValueError(f"unknown overflow model {overflow!r}")
        self.index, self.capacity, self.speed = index, capacity, speed
        self.steptime, self.overflow = steptime, overflow
        self.max_running = max_running
        self.orders = itertools.count()
        self.preemptions = self.recomputed = self.generated = self.itl_count = 0
        self.itl_sum = 0.0
        self.version = 0  # a scheduled wake-up is stale once this has moved on
        self.reset(0.0)

    def reset(self, now: float) -> None:
        """Empty (new weights: the prefix cache is dropped too)."""
        self.clock, self.steps = now, 0
        self.running: dict[int, Request] = {}  # admission order
        self.finishes: list[tuple[int, int, int]] = []  # (finish step, order, key), lazy
        self.kv_base = 0  # sum of (context - join_step) over running: kv = kv_base + n * steps
        self.waiting: collections.deque[Request] = collections.deque()
        self.cache: collections.OrderedDict[int, int] = collections.OrderedDict()
        self.cached = 0
        self.ratio = SGLANG_INIT_RATIO
        self.budget_base = 0.0  # SGLang: sum of clipped budgets minus their linear use
        self.weight_sum = 0.0
        self.blocked_until = 0  # no admission before this step (a preemption, a retraction)
        self.step_dt = 0.0
        self.idle_since: float | None = now
        self.idle: list[tuple[float, float]] = []
        self.busy_s = 0.0

    # ----------------------------------------------------------------- the books
    def kv(self) -> int:
        return self.kv_base + len(self.running) * self.steps

    def reserved_estimate(self) -> float:
        """SGLang's estimate of what the running requests will still decode."""
        return (self.budget_base - self.steps * self.weight_sum) * self.ratio

    def load(self) -> EngineLoad:
        return EngineLoad(kv_capacity_tokens=self.capacity, kv_used_tokens=self.kv(),
                          running=len(self.running), waiting=len(self.waiting),
                          preemptions=self.preemptions, busy_s=self.busy_s,
                          generation_tokens=self.generated, inter_token_seconds=self.itl_sum,
                          inter_tokens=self.itl_count)

    def evict_cache(self, tokens: int) -> bool:
        """Free cached prefixes (least recently used first) until ``tokens`` fit."""
        while self.capacity - self.kv() - self.cached < tokens and self.cache:
            _, size = self.cache.popitem(last=False)
            self.cached -= size
        return self.capacity - self.kv() - self.cached >= tokens

    # ----------------------------------------------------------------- requests
    def submit(self, trajectory: Trajectory, new_tokens: int, turn_tokens: int) -> None:
        """The trajectory's next turn arrives (its context already includes ``new_tokens``)."""
        budget = trajectory.budget - trajectory.response_tokens
        self.waiting.append(Request(trajectory, trajectory.context, turn_tokens, max(budget, 1)))

    def join(self, request: Request) -> None:
        key = request.trajectory.key
        request.join_step, request.order = self.steps, next(self.orders)
        self.running[key] = request
        self.kv_base += request.context - self.steps
        heapq.heappush(self.finishes, (self.steps + request.remaining, request.order, key))
        clipped = min(request.max_new - request.output, SGLANG_CLIP)
        request.weight = clipped / max(1, request.max_new - request.output)
        self.budget_base += clipped + self.steps * request.weight
        self.weight_sum += request.weight

    def leave(self, key: int) -> Request:
        request = self.running.pop(key)
        self.kv_base -= request.context - request.join_step
        self.budget_base -= min(request.max_new - request.output, SGLANG_CLIP) + (
            request.join_step * request.weight)
        self.weight_sum -= request.weight
        return request

    def admit_waiting(self) -> None:
        """Admit what the engine's own rule admits now; prefill time goes on the clock."""
        if self.steps < self.blocked_until:
            return
        if self.overflow == "sglang" and len(self.waiting) <= LPM_LIMIT:
            self.waiting = collections.deque(sorted(
                self.waiting, key=lambda r: -self.cache.get(r.trajectory.key, 0)))
        prefill = 0
        while self.waiting and len(self.running) < self.max_running:
            request = self.waiting[0]
            key = request.trajectory.key
            hit = min(self.cache.get(key, 0), request.context - 1)
            new = request.context - hit
            if self.running and not self.fits(request, new):
                break
            self.waiting.popleft()
            if key in self.cache:
                self.cached -= self.cache.pop(key)
            self.evict_cache(new)
            self.recomputed += max(0, request.context - hit - self.fresh_tokens(request))
            prefill += new
            self.join(request)
        if prefill:
            spent = prefill * self.steptime.prefill_per_token_s * self.speed
            self.clock += spent
            self.busy_s += spent

    @staticmethod
    def fresh_tokens(request: Request) -> int:
        """Tokens of the request no engine had computed before (the turn's new input)."""
        trajectory = request.trajectory
        if request.output:
            return 0
        return trajectory.prompt_tokens if trajectory.turn == 0 else trajectory.tool_tokens

    def fits(self, request: Request, new: int) -> bool:
        free = self.capacity - self.kv()  # cached prefixes are evictable
        if self.overflow == "sglang":
            ask = new + min(request.max_new - request.output, SGLANG_CLIP) * self.ratio
            return ask <= free - self.reserved_estimate()
        return new <= free

    # ----------------------------------------------------------------- time
    def advance(self, time: float) -> list[Trajectory]:
        """Decode up to the step boundary at or after ``time`` (or the next turn's end);
        returns the trajectories whose turn ended."""
        if time <= self.clock:
            return []
        if not self.running:
            self.clock = time
            return []
        steps = int(-(-(time - self.clock) // self.step_dt))
        steps = min(steps, self.next_finish() - self.steps)
        n = len(self.running)
        self.steps += steps
        self.clock += steps * self.step_dt
        self.busy_s += steps * self.step_dt
        self.generated += steps * n
        self.itl_count += steps * n
        self.itl_sum += steps * n * self.step_dt
        if self.overflow == "sglang":
            self.ratio = max(SGLANG_MIN_RATIO, self.ratio - steps * SGLANG_DECAY)
        self.evict_cache(0)
        ended = []
        while self.running and self.next_finish() <= self.steps:
            _, _, key = heapq.heappop(self.finishes)
            request = self.leave(key)
            trajectory = request.trajectory
            trajectory.context = request.context + self.steps - request.join_step
            self.cache[key] = trajectory.context
            self.cached += trajectory.context
            if self.overflow == "evict_half":
                self.blocked_until = 0
            ended.append(trajectory)
        return ended

    def next_finish(self) -> int:
        """The step at which the first running turn ends (stale heap entries dropped)."""
        while True:
            step, order, key = self.finishes[0]
            request = self.running.get(key)
            if request is not None and request.order == order:
                return step
            heapq.heappop(self.finishes)

    def next_wake(self) -> float | None:
        """Admit, handle overflow, and say when the next internal event happens."""
        self.admit_waiting()
        while self.running and not self.evict_cache(len(self.running)):
            self.overflow_step()
        if not self.running:
            if self.idle_since is None:
                self.idle_since = self.clock
            return None
        if self.idle_since is not None:
            self.idle.append((self.idle_since, self.clock))
            self.idle_since = None
        n = len(self.running)
        self.step_dt = self.steptime.decode(n, self.kv()) * self.speed
        steps = min(self.next_finish() - self.steps, (self.capacity - self.kv()) // n, MAX_CHUNK)
        if self.waiting and self.overflow == "sglang":
            steps = min(steps, 16)  # its admission ratio decays: look again soon
        return self.clock + max(1, steps) * self.step_dt

    def overflow_step(self) -> None:
        if self.overflow == "vllm":
            key = next(reversed(self.running))
            self.requeue(key, front=True)
            self.blocked_until = self.steps + 1
        elif self.overflow == "sglang":
            self.retract()
        else:
            order = sorted(self.running.values(), key=lambda r: r.order)
            for request in order[len(order) // 2:] or order:
                self.requeue(request.trajectory.key, front=True)
            self.blocked_until = 1 << 62

    def retract(self) -> None:
        order = sorted(self.running.values(),
                       key=lambda r: (r.generated(self.steps), -r.context), reverse=True)
        while len(order) > 1:
            self.requeue(order.pop().trajectory.key, front=False)
            if self.evict_cache(len(order) * RETRACT_STEPS):
                break
        decoded = sum(r.generated(self.steps) for r in order)
        budgets = sum(r.max_new for r in order)
        self.ratio = min(1.0, (decoded + RETRACT_STEPS * len(order)) / max(1, budgets))
        self.blocked_until = self.steps + 1

    def requeue(self, key: int, front: bool) -> None:
        """Take a running request out of KV; it waits to recompute its whole context."""
        request = self.leave(key)
        done = self.steps - request.join_step
        request.context += done
        request.output += done
        request.remaining -= done
        self.preemptions += 1
        if front:
            self.waiting.appendleft(request)
        else:
            self.waiting.append(request)
