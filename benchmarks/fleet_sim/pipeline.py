"""The learner's side of a run over the simulated fleet: synchronous steps against the
asynchronous trainer's (``rstar2.rl.asynchronous``), on one discrete-event clock.

Both run ``steps`` batches of the same trajectories (``draw_trajectories(workload, batch)``)
through the fleet's own ``Scheduler`` and the simulated engines of ``driver.Simulation``:

* batch b is submitted once the engines hold version b - k (admission, as
  ``SampledAhead.produce``); k = 0 is the synchronous loop: each batch after the previous
  step's push, the engines idle from its last trajectory to the next push;
* the update of step b starts when batch b has ended and the learner is free, and takes the
  profile's ``update_s``;
* a push pauses every engine for ``push_s`` (running requests keep their keys: the 'keep'
  mode; the pause counts as idle) and drops their prefix caches (new weights).

The learner profile says how long an update and a push take. The update time is stated as a
share of the step: at the paper's scale rollouts are about 70% of a synchronous RL step
(RollPacker, arXiv 2509.21009; APRIL reports over 90%), so by default an update takes 3/7 of
the synchronous run's mean batch makespan, measured in the same run; the push of a 14B
model's weights to every engine takes ``push_s`` (verl's checkpoint engine: about 7 s for a 30B
model to 30 replicas). Figures: trajectories trained per hour, the engines' idle share, the
learner's idle share, the mean and largest staleness of the trained batches (versions between
a batch's admission and its update).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from benchmarks.fleet_sim.driver import Simulation
from benchmarks.fleet_sim.workload import draw_trajectories

KEYS_PER_BATCH = 1 << 24  # trajectory keys of batch b: b * KEYS_PER_BATCH + its index


@dataclass(frozen=True)
class LearnerProfile:
    update_s: float
    """Seconds of one update (forward, backward, optimizer) over a batch."""
    push_s: float
    """Seconds the engines are paused while new weights arrive."""


@dataclass
class PipelineResult:
    mode: str
    wall_s: float
    trajectories: int
    engine_idle_share: float
    learner_idle_share: float
    staleness_mean: float
    staleness_max: int

    @property
    def per_hour(self) -> float:
        return self.trajectories * 3600.0 / self.wall_s


class PipelineSimulation(Simulation):
    """``steps`` batches trained with staleness bound ``max_staleness`` (0: synchronously)."""

    def run_pipeline(self, steps: int, learner: LearnerProfile, max_staleness: int) -> PipelineResult:
        self.events = []
        self.left = steps * self.workload.prompts * self.workload.rollouts_per_prompt
        self.paused_s = 0.0  # engine-seconds paused by pushes while busy
        self.batch_of: dict[int, int] = {}
        self.trajectories = {}
        self.left_in = {b: 0 for b in range(steps)}
        self.done, self.moves = [], 0
        self.version, self.admitted_at, self.staleness = 0, {}, []
        self.learner_free_at, self.learner_idle, self.trained = 0.0, 0.0, -1
        self.learner, self.k, self.steps = learner, max_staleness, steps
        for engine in self.engines:
            engine.reset(0.0)
        self.tools.reset()
        self.finished_at = 0.0
        self.admit_batches(0.0)
        self.at(self.fleet.poll_s, "poll")
        while self.trained < steps - 1:
            time, order, kind, data = heapq.heappop(self.events)
            if kind == "updated":
                self.push(data[0], time)
            elif kind == "pushed":
                self.pushed(data[0], time)
            else:
                self.handle(time, order, kind, data)
        return self.result(steps)

    # ----------------------------------------------------------------- batches and the learner
    def admitted(self, batch: int) -> bool:
        return self.version >= batch - self.k

    def admit_batches(self, time: float) -> None:
        for batch in range(self.steps):
            if batch in self.admitted_at or not self.admitted(batch):
                continue
            self.admitted_at[batch] = self.version
            for t in draw_trajectories(self.workload, batch):
                t.key += batch * KEYS_PER_BATCH
                t.group += batch * KEYS_PER_BATCH
                self.trajectories[t.key] = t
                self.batch_of[t.key] = batch
                self.left_in[batch] += 1
                self.scheduler.submit(t.key, t.prompt_tokens + t.budget, t.prompt_tokens, t.group)
        self.admit(time)

    def turn_ended(self, trajectory, time: float) -> None:
        super().turn_ended(trajectory, time)
        if trajectory.finished_at is not None and trajectory.key in self.batch_of:
            batch = self.batch_of.pop(trajectory.key)
            self.left_in[batch] -= 1
            if self.left_in[batch] == 0:
                self.maybe_update(time)

    def maybe_update(self, time: float) -> None:
        """Start the next step's update if its batch has ended and the learner is free."""
        step = self.trained + 1
        if step >= self.steps or step not in self.admitted_at or self.left_in[step] > 0:
            return
        if getattr(self, "updating", False):
            return
        self.updating = True
        self.learner_idle += max(0.0, time - self.learner_free_at)
        self.staleness.append(step - self.admitted_at[step])
        self.at(time + self.learner.update_s, "updated", step)

    def push(self, step: int, time: float) -> None:
        for engine in self.engines:  # paused for the push: no progress until it is over
            self.settle(engine, time)
            if engine.idle_since is None:
                self.paused_s += self.learner.push_s
            engine.cache.clear()
            engine.cached = 0
            engine.clock = max(engine.clock, time + self.learner.push_s)
            engine.version += 1
            wake = engine.next_wake()
            if wake is not None:
                self.at(wake, "wake", engine, engine.version)
        self.at(time + self.learner.push_s, "pushed", step)

    def pushed(self, step: int, time: float) -> None:
        self.version, self.trained, self.updating = step + 1, step, False
        self.learner_free_at = time
        self.admit_batches(time)
        self.maybe_update(time)

    def result(self, steps: int) -> PipelineResult:
        wall = self.learner_free_at
        idle = 0.0
        for engine in self.engines:
            spans = engine.idle + ([(engine.idle_since, wall)] if engine.idle_since is not None else [])
            idle += sum(max(0.0, min(end, wall) - start) for start, end in spans)
        mode = "sync" if self.k == 0 else f"async k={self.k}"
        return PipelineResult(mode, wall, steps * self.workload.prompts * self.workload.rollouts_per_prompt,
                              (idle + self.paused_s) / (len(self.engines) * wall), self.learner_idle / wall,
                              sum(self.staleness) / len(self.staleness), max(self.staleness))
