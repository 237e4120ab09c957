"""Discrete-event simulation of one rollout step on many engines, under each scheduling policy.

    python benchmarks/scheduler_sim.py                      # the paper's setting (minutes)
    python benchmarks/scheduler_sim.py --engines 8 --prompts 32 --rollouts-per-prompt 8

The policies are the fleet's own (``rstar2.engines.fleet.policies.Scheduler``): this script
only replaces the engines. Each simulated engine has a KV capacity in tokens and decodes all
its running sequences one token per step, a step taking ``step_base_s + step_per_seq_s * n +
step_per_kv_token_s * kv`` (memory-bound decoding: a batch costs little more than one
sequence); admitting a turn first prefills its new tokens at ``prefill_per_token_s``. An
engine admits a turn while its context fits in free KV; when decoding fills the KV it evicts
half of its running requests (SGLang's overflow behaviour, paper §3.2), which wait until a
running turn ends and then recompute their whole context (counted as recomputed tokens). A finished turn's prefix stays
cached for the trajectory's next turn.

Trajectories: a prompt of ``prompt_tokens``; a response length drawn from a log-normal
(``median_response_tokens``, ``response_sigma``) capped at the budget (the long tail);
Poisson(``tool_calls_mean``) tool calls, each ``tool_response_tokens`` long and taking an
exponential time of mean ``tool_latency_s`` (dispatched the moment its turn ends); the
generated tokens split over the turns at random. ``--rollouts-dir runs/<run>/rollouts`` draws
(response length, tool-call count) pairs from a real run's logged rollouts instead.

Printed per policy: makespan, mean engine idle share, idle share in the last 20% of the step,
the share of the step taken by the last 10% of trajectories to finish (Seer, arXiv 2511.14617,
reports up to half under static assignment: the check that the simulated tail is realistic),
recomputed tokens and evictions.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rstar2.engines.fleet.policies import POLICIES, Scheduler


@dataclass
class Settings:
    engines: int = 64
    prompts: int = 512
    rollouts_per_prompt: int = 32
    prompt_tokens: int = 600
    max_response_tokens: int = 8192
    median_response_tokens: float = 1500.0
    response_sigma: float = 0.8
    tool_calls_mean: float = 2.7
    max_turns: int = 10
    tool_response_tokens: int = 80
    tool_latency_s: float = 0.3
    kv_capacity_tokens: int = 512 * 1024
    step_base_s: float = 0.020
    step_per_seq_s: float = 0.0001
    step_per_kv_token_s: float = 2e-8
    prefill_per_token_s: float = 0.00005
    seed: int = 0
    rollouts_dir: str = ""


@dataclass
class Trajectory:
    key: int
    segments: list[int]  # tokens generated in each turn
    turn: int = 0
    context: int = 0  # tokens in KV once the current turn's prefix is in
    finished_at: float = 0.0


@dataclass
class Running:
    trajectory: Trajectory
    join_step: int
    context_at_join: int
    finish_step: int


@dataclass
class Engine:
    index: int
    capacity: int
    steps: int = 0  # decode steps done
    clock: float = 0.0  # time the engine has simulated up to
    running: dict[int, Running] = field(default_factory=dict)
    waiting: list[tuple[Trajectory, int]] = field(default_factory=list)  # (turn, tokens to prefill)
    step_dt: float = 0.0  # step time of the current chunk
    version: int = 0  # invalidates scheduled wake-ups when the engine's state changes
    retracted: bool = False  # after an eviction nothing is admitted until a running turn ends
    idle_since: float | None = 0.0
    idle: list[tuple[float, float]] = field(default_factory=list)

    def kv(self) -> int:
        return sum(r.context_at_join + self.steps - r.join_step for r in self.running.values())


class Simulation:
    def __init__(self, settings: Settings, policy: str):
        self.s = settings
        self.policy = policy
        self.engines = [Engine(i, settings.kv_capacity_tokens) for i in range(settings.engines)]
        self.scheduler = Scheduler(policy, [settings.kv_capacity_tokens] * settings.engines)
        self.events: list = []
        self.counter = 0
        self.recomputed = 0
        self.evictions = 0
        self.trajectories = draw_trajectories(settings)
        self.done: list[float] = []

    # ----------------------------------------------------------------- event queue
    def at(self, time: float, kind: str, *data) -> None:
        self.counter += 1
        heapq.heappush(self.events, (time, self.counter, kind, data))

    def run(self) -> dict:
        need = self.s.prompt_tokens + self.s.max_response_tokens
        for t in self.trajectories:
            self.scheduler.submit(t.key, need)
        self.admit(0.0)
        while self.events:
            time, _, kind, data = heapq.heappop(self.events)
            if kind == "wake":
                engine, version = data
                if version == engine.version:
                    self.advance(engine, time)
                    self.reschedule(engine)
            else:  # a tool call returned: the trajectory's next turn goes to its engine
                (trajectory,) = data
                engine = self.engines[self.scheduler.member_of(trajectory.key)]
                new = self.s.tool_response_tokens
                self.arrive(engine, time, trajectory, new)
        return self.report()

    def admit(self, time: float) -> None:
        for key, member in self.scheduler.admit():
            trajectory = self.trajectories[key]
            trajectory.context = 0
            self.arrive(self.engines[member], time, trajectory, self.s.prompt_tokens)

    # ----------------------------------------------------------------- engines
    def arrive(self, engine: Engine, time: float, trajectory: Trajectory, new_tokens: int) -> None:
        self.advance(engine, time)
        engine.waiting.append((trajectory, new_tokens))
        self.reschedule(engine)

    def advance(self, engine: Engine, time: float) -> None:
        """Run ``engine``'s current chunk up to the step boundary at or after ``time``,
        finishing the turns that end there."""
        if time <= engine.clock:
            return
        if not engine.running:
            engine.clock = time
            return
        steps = math.ceil((time - engine.clock) / engine.step_dt - 1e-9)
        next_finish = min(r.finish_step for r in engine.running.values())
        steps = min(steps, next_finish - engine.steps)
        engine.steps += steps
        engine.clock += steps * engine.step_dt
        for key in [k for k, r in engine.running.items() if r.finish_step <= engine.steps]:
            engine.retracted = False
            self.end_turn(engine, engine.running.pop(key))

    def end_turn(self, engine: Engine, running: Running) -> None:
        trajectory = running.trajectory
        trajectory.context = running.context_at_join + engine.steps - running.join_step
        trajectory.turn += 1
        if trajectory.turn == len(trajectory.segments):
            trajectory.finished_at = engine.clock
            self.done.append(engine.clock)
            self.scheduler.release(trajectory.key)
            self.admit(engine.clock)
        else:
            latency = self.rng_latency()
            self.at(engine.clock + latency, "tool", trajectory)

    def reschedule(self, engine: Engine) -> None:
        """Admit what fits, evict on overflow, and schedule the next internal event."""
        engine.version += 1
        self.start_waiting(engine)
        if not engine.running:
            if engine.idle_since is None:
                engine.idle_since = engine.clock
            return
        if engine.idle_since is not None:
            engine.idle.append((engine.idle_since, engine.clock))
            engine.idle_since = None
        n, kv = len(engine.running), engine.kv()
        engine.step_dt = self.s.step_base_s + self.s.step_per_seq_s * n + self.s.step_per_kv_token_s * kv
        next_finish = min(r.finish_step for r in engine.running.values()) - engine.steps
        room = engine.capacity - kv
        if room < n:  # the next step does not fit: evict half of the running requests
            self.evict(engine)
            self.reschedule(engine)
            return
        steps = min(next_finish, room // n, 256)  # re-time the step at least every 256 steps
        self.at(engine.clock + steps * engine.step_dt, "wake", engine, engine.version)

    def start_waiting(self, engine: Engine) -> None:
        kv = engine.kv()
        prefill = 0
        while engine.waiting:
            trajectory, new = engine.waiting[0]
            context = trajectory.context + new
            if engine.running and (engine.retracted or kv + context > engine.capacity):
                break
            engine.waiting.pop(0)
            kv += context
            prefill += new
            trajectory.context = context
            length = trajectory.segments[trajectory.turn]
            engine.running[trajectory.key] = Running(trajectory, engine.steps, context,
                                                     engine.steps + length)
        engine.clock += prefill * self.s.prefill_per_token_s

    def evict(self, engine: Engine) -> None:
        """SGLang's retraction: the half of the running requests admitted last lose their KV
        and go back to wait; their whole context is computed again when they return."""
        order = sorted(engine.running.values(), key=lambda r: (r.join_step, r.trajectory.key))
        for running in order[len(order) // 2:] or order:
            del engine.running[running.trajectory.key]
            trajectory = running.trajectory
            done = engine.steps - running.join_step
            trajectory.segments[trajectory.turn] -= done
            context = running.context_at_join + done
            trajectory.context = 0
            self.recomputed += context
            self.evictions += 1
            engine.waiting.insert(0, (trajectory, context))
        engine.retracted = True

    def rng_latency(self) -> float:
        return float(self.latency_rng.exponential(self.s.tool_latency_s))

    # ----------------------------------------------------------------- figures
    def report(self) -> dict:
        makespan = max(self.done)
        tail_start = 0.8 * makespan
        idle = idle_tail = 0.0
        for engine in self.engines:
            spans = engine.idle + ([(engine.idle_since, makespan)] if engine.idle_since is not None else [])
            for start, end in spans:
                end = min(end, makespan)
                idle += max(0.0, end - start)
                idle_tail += max(0.0, end - max(start, tail_start))
        k = len(self.engines)
        finished = sorted(self.done)
        t90 = finished[int(0.9 * len(finished)) - 1]
        return {"policy": self.policy, "makespan_s": makespan, "idle_share": idle / (k * makespan),
                "idle_share_last_20pct": idle_tail / (k * (makespan - tail_start)),
                "last_10pct_share": (makespan - t90) / makespan,
                "recomputed_tokens": self.recomputed, "evictions": self.evictions}


def draw_trajectories(s: Settings) -> list[Trajectory]:
    """The step's trajectories, the same for every policy (seeded)."""
    rng = np.random.default_rng(s.seed)
    count = s.prompts * s.rollouts_per_prompt
    if s.rollouts_dir:
        observed = logged_rollouts(Path(s.rollouts_dir), s.tool_response_tokens)
        picks = rng.integers(len(observed), size=count)
        lengths = np.array([observed[i][0] for i in picks], dtype=float)
        calls = np.minimum([observed[i][1] for i in picks], s.max_turns - 1)
    else:
        calls = np.minimum(rng.poisson(s.tool_calls_mean, count), s.max_turns - 1)
        lengths = rng.lognormal(math.log(s.median_response_tokens), s.response_sigma, count)
    trajectories = []
    for key in range(count):
        budget = s.max_response_tokens - calls[key] * s.tool_response_tokens
        generated = max(int(min(lengths[key], budget)), calls[key] + 1)
        shares = rng.dirichlet(np.ones(calls[key] + 1))
        segments = np.maximum(1, np.floor(shares * generated)).astype(int).tolist()
        trajectories.append(Trajectory(key, segments))
    return trajectories


def logged_rollouts(folder: Path, tool_response_tokens: int) -> list[tuple[int, int]]:
    """(generated tokens, tool calls) of every rollout in a run's ``rollouts/step_*.jsonl``."""
    pairs = []
    for file in sorted(folder.glob("step_*.jsonl")):
        for line in file.open():
            row = json.loads(line)
            calls = len(row["tool_calls"])
            pairs.append((max(1, row["response_tokens"] - calls * tool_response_tokens), calls))
    if not pairs:
        raise SystemExit(f"{folder}: no rollouts/step_*.jsonl rows")
    return pairs


def simulate(settings: Settings, policy: str) -> dict:
    simulation = Simulation(settings, policy)
    simulation.latency_rng = np.random.default_rng([settings.seed, 1])
    return simulation.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in vars(Settings()).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    parser.add_argument("--policies", default=",".join(POLICIES))
    args = vars(parser.parse_args())
    policies = args.pop("policies").split(",")
    settings = Settings(**args)
    print(f"{settings.engines} engines x {settings.kv_capacity_tokens} KV tokens, "
          f"{settings.prompts} x {settings.rollouts_per_prompt} rollouts, "
          f"response cap {settings.max_response_tokens}, {settings.tool_calls_mean} tool calls "
          f"at {settings.tool_latency_s} s")
    print(f"{'policy':<13} {'makespan s':>10} {'idle':>6} {'idle last20%':>12} "
          f"{'last10% share':>13} {'recomputed tok':>14} {'evictions':>9}")
    for policy in policies:
        r = simulate(settings, policy)
        print(f"{policy:<13} {r['makespan_s']:>10.1f} {r['idle_share']:>6.3f} "
              f"{r['idle_share_last_20pct']:>12.3f} {r['last_10pct_share']:>13.3f} "
              f"{r['recomputed_tokens']:>14d} {r['evictions']:>9d}")


if __name__ == "__main__":
    main()
