"""The fleet's part, over simulated engines: the same ``Scheduler`` calls ``fleet.Fleet``
makes, in the same order, on a discrete-event clock.

A trajectory is submitted with its prompt group, admitted to a member, and runs its turns
there; between two turns it waits on a tool call, then asks the scheduler where its next turn
runs (``begin_turn``: another member re-prefills its whole context). Members are read every
``poll_s`` as the fleet polls ``/metrics``, and a reading reaches the scheduler
``metrics_delay_s`` later (the scrape). Steps run one after another with the same scheduler
(its measurements carry over, as in a training run); between steps the engines are emptied
(new weights) and every trajectory of the next step is submitted at once.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np

from benchmarks.fleet_sim.engine import SimEngine
from benchmarks.fleet_sim.steptime import StepTime
from benchmarks.fleet_sim.workload import ToolService, Trajectory, Workload, draw_trajectories
from rstar2.fleet.scheduler import Scheduler


@dataclass
class Fleet:
    engines: int = 64
    kv_capacity_tokens: int = 512 * 1024
    overflow: str = "sglang"
    slow_engines: int = 0  # how many engines run slower
    slow_factor: float = 2.0  # by how much
    poll_s: float = 0.25
    metrics_delay_s: float = 0.1
    steps: int = 2


@dataclass
class StepResult:
    makespan_s: float
    idle_share: float
    idle_share_last_20pct: float
    last_10pct_share: float
    recomputed_tokens: int
    preemptions: int
    moves: int


def longest_context(workload: Workload) -> int:
    """The most KV one trajectory can hold: its prompt and its whole response budget (tool
    responses count against it)."""
    return workload.prompt_tokens + workload.max_response_tokens


@dataclass
class Simulation:
    fleet: Fleet
    workload: Workload
    steptime: StepTime
    policy: str
    results: list[StepResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        f = self.fleet
        longest = longest_context(self.workload)
        if f.kv_capacity_tokens < longest:
            raise ValueError(
                f"an engine's KV capacity ({f.kv_capacity_tokens} tokens) holds less than one "
                f"trajectory's longest context ({longest}: prompt + response budget); vLLM and "
                "SGLang refuse to start so. Give each engine more.")
        speeds = [f.slow_factor if i >= f.engines - f.slow_engines else 1.0
                  for i in range(f.engines)]
        self.engines = [SimEngine(i, f.kv_capacity_tokens, speeds[i], self.steptime, f.overflow)
                        for i in range(f.engines)]
        self.scheduler = Scheduler(self.policy, [f.kv_capacity_tokens] * f.engines)
        self.tools = ToolService(self.workload, np.random.default_rng([self.workload.seed, 99]))
        self.counter = itertools.count()

    def at(self, time: float, kind: str, *data) -> None:
        heapq.heappush(self.events, (time, next(self.counter), kind, data))

    def run(self) -> list[StepResult]:
        for step in range(self.fleet.steps):
            self.results.append(self.run_step(step))
        return self.results

    def run_step(self, step: int) -> StepResult:
        self.events: list = []
        self.trajectories = {t.key: t for t in draw_trajectories(self.workload, step)}
        self.left, self.done = len(self.trajectories), []
        self.moves = 0
        counters = [(e.recomputed, e.preemptions) for e in self.engines]
        for engine in self.engines:
            engine.reset(0.0)
        self.tools.reset()
        for t in self.trajectories.values():
            self.scheduler.submit(t.key, t.prompt_tokens + t.budget, t.prompt_tokens, t.group)
        self.admit(0.0)
        self.at(self.fleet.poll_s, "poll")
        while self.left:
            self.handle(*heapq.heappop(self.events))
        return self.figures(counters)

    def handle(self, time: float, _order, kind: str, data) -> None:
        """One event of the fleet: an engine's step ending, a tool call returning, the
        scheduler's poll of the engines' metrics, or a reading reaching the scheduler."""
        if kind == "wake":
            engine, version = data
            if version == engine.version:
                self.settle(engine, time)
        elif kind == "tool":
            self.next_turn(data[0], time)
        elif kind == "poll":
            for engine in self.engines:
                self.settle(engine, time)
                self.at(time + self.fleet.metrics_delay_s, "reading", engine.index, engine.load())
            self.at(time + self.fleet.poll_s, "poll")
        else:
            self.scheduler.report(*data)

    # ----------------------------------------------------------------- the fleet's calls
    def admit(self, time: float) -> None:
        for key, member in self.scheduler.admit():
            trajectory = self.trajectories[key]
            trajectory.context, trajectory.member = trajectory.prompt_tokens, member
            self.send(trajectory, time, trajectory.prompt_tokens)

    def next_turn(self, trajectory: Trajectory, time: float) -> None:
        trajectory.context += trajectory.tool_tokens
        member = self.scheduler.begin_turn(trajectory.key, trajectory.context)
        if member != trajectory.member:
            self.moves += 1
            trajectory.member = member
        self.send(trajectory, time, trajectory.tool_tokens)

    def send(self, trajectory: Trajectory, time: float, new_tokens: int) -> None:
        engine = self.engines[trajectory.member]
        self.settle(engine, time, arriving=(trajectory, new_tokens))

    def settle(self, engine: SimEngine, time: float, arriving=None) -> None:
        """Bring ``engine`` to ``time``, hand over what arrives, and schedule its next event."""
        ended = engine.advance(time)
        if arriving is not None:
            trajectory, new_tokens = arriving
            engine.submit(trajectory, new_tokens, trajectory.segments[trajectory.turn])
        engine.version += 1
        wake = engine.next_wake()
        if wake is not None:
            self.at(wake, "wake", engine, engine.version)
        for trajectory in ended:
            self.turn_ended(trajectory, engine.clock)

    def turn_ended(self, trajectory: Trajectory, time: float) -> None:
        trajectory.turn += 1
        if trajectory.turn == len(trajectory.segments):
            trajectory.finished_at = time
            self.done.append(time)
            self.left -= 1
            self.scheduler.end_turn(trajectory.key, trajectory.context)
            self.scheduler.release(trajectory.key, finished=True)
            self.admit(time)
        else:
            self.scheduler.end_turn(trajectory.key, trajectory.context)
            self.at(self.tools.call(time), "tool", trajectory)

    # ----------------------------------------------------------------- figures
    def figures(self, counters: list[tuple[int, int]]) -> StepResult:
        makespan = max(self.done)
        tail = 0.8 * makespan
        idle = idle_tail = 0.0
        for engine in self.engines:
            spans = engine.idle + ([(engine.idle_since, makespan)]
                                   if engine.idle_since is not None else [])
            for start, end in spans:
                end = min(end, makespan)
                idle += max(0.0, end - start)
                idle_tail += max(0.0, end - max(start, tail))
        k = len(self.engines)
        finished = sorted(self.done)
        t90 = finished[int(0.9 * len(finished)) - 1]
        return StepResult(
            makespan, idle / (k * makespan), idle_tail / (k * (makespan - tail)),
            (makespan - t90) / makespan,
            sum(e.recomputed for e in self.engines) - sum(c[0] for c in counters),
            sum(e.preemptions for e in self.engines) - sum(c[1] for c in counters), self.moves)
