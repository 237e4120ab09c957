"""The scheduler simulator's engines (``benchmarks/fleet_sim``): each overflow model does what
the engine it stands for does, on hand-made cases, and whole simulated steps finish every
trajectory exactly once under every policy and overflow model."""

import pytest

from benchmarks.fleet_sim.driver import Fleet, Simulation, longest_context
from benchmarks.fleet_sim.engine import Request, SimEngine
from benchmarks.fleet_sim.pipeline import LearnerProfile, PipelineSimulation
from benchmarks.fleet_sim.steptime import PROFILES
from benchmarks.fleet_sim.workload import Trajectory, Workload
from rstar2.fleet.scheduler import POLICIES

STEPTIME = PROFILES["vllm-14b-tp2"]


def engine_with(overflow, capacity, prompts, turn_tokens=1000):
    """An engine running one turn of each trajectory (prompt sizes ``prompts``), admitted in
    that order."""
    engine = SimEngine(0, capacity, 1.0, STEPTIME, overflow)
    trajectories = []
    for key, prompt in enumerate(prompts):
        t = Trajectory(key, 0, prompt, [turn_tokens], 0, 4096, context=prompt)
        trajectories.append(t)
        engine.submit(t, prompt, turn_tokens)
    engine.ratio = 0.0  # SGLang's estimate aside: admit all of them now
    engine.next_wake()
    assert list(engine.running) == list(range(len(prompts)))
    return engine, trajectories


def run_until_overflow(engine):
    """Decode until the next step would not fit, then let the engine handle it."""
    steps = (engine.capacity - engine.kv()) // len(engine.running)
    engine.advance(engine.clock + steps * engine.step_dt)
    before = set(engine.running)
    engine.next_wake()
    return before - set(engine.running)


def test_vllm_preempts_the_newest_request_one_at_a_time_and_requeues_it_first():
    engine, _ = engine_with("vllm", 1000, [300, 300, 300])
    evicted = run_until_overflow(engine)
    assert evicted == {2}  # the newest; one was enough for the next step
    assert engine.waiting[0].trajectory.key == 2 and engine.preemptions == 1
    assert engine.waiting[0].context == 300 + engine.steps  # recomputes prompt and output


def test_sglang_retracts_fewest_output_first_until_twenty_steps_fit():
    engine = SimEngine(0, 1000, 1.0, STEPTIME, "sglang")
    for key, prompt in ((0, 300), (1, 250)):
        engine.submit(Trajectory(key, 0, prompt, [1000], 0, 4096, context=prompt), prompt, 1000)
    resumed = Trajectory(2, 0, 100, [1000], 0, 4096, context=200)  # back after a retraction,
    engine.waiting.append(Request(resumed, 200, 900, 1000, output=100))  # 100 tokens decoded
    engine.ratio = 0.0
    engine.next_wake()
    evicted = run_until_overflow(engine)
    assert evicted == {0}  # not the newest (2): fewest output tokens, longest input on ties
    assert engine.capacity - engine.kv() >= 20 * len(engine.running)
    assert engine.ratio > 0  # admission turns cautious again after a retraction


def test_evict_half_evicts_the_later_admitted_half_at_once():
    engine, _ = engine_with("evict_half", 1000, [200, 200, 200, 200])
    assert run_until_overflow(engine) == {2, 3}
    assert engine.preemptions == 2


def test_a_cached_prefix_is_evicted_for_running_requests_and_recomputed_on_return():
    engine = SimEngine(0, 1000, 1.0, STEPTIME, "vllm")
    waiting = Trajectory(0, 0, 400, [10, 50], 20, 4096, context=400)
    engine.submit(waiting, 400, 10)
    engine.next_wake()
    (ended,) = engine.advance(engine.clock + 11 * engine.step_dt)
    assert ended is waiting and engine.cached == 410  # its turn ended; its prefix stays cached
    hog = Trajectory(1, 0, 500, [400], 0, 4096, context=500)
    engine.submit(hog, 500, 400)
    engine.next_wake()
    engine.advance(engine.clock + 300 * engine.step_dt)
    assert engine.cached == 0  # the growing request took the cached prefix's room
    waiting.context += 20
    waiting.turn = 1
    recomputed = engine.recomputed
    engine.submit(waiting, 20, 50)
    engine.advance(engine.clock + 200 * engine.step_dt)
    engine.next_wake()
    assert engine.recomputed - recomputed == 410  # all of it prefilled again


@pytest.mark.parametrize("overflow", ["sglang", "vllm", "evict_half"])
def test_a_simulated_step_finishes_every_trajectory_once_under_every_policy(overflow):
    workload = Workload(prompts=16, rollouts_per_prompt=8)
    for policy in POLICIES:
        fleet = Fleet(engines=4, kv_capacity_tokens=24_000, overflow=overflow, slow_engines=1,
                      steps=2)
        simulation = Simulation(fleet, workload, STEPTIME, policy)
        for result in simulation.run():
            assert result.makespan_s > 0
        finished = [t.finished_at for t in simulation.trajectories.values()]
        assert len(finished) == 128 and all(f is not None for f in finished)
        assert len(simulation.done) == 128


def test_an_engine_that_cannot_hold_one_trajectory_is_refused():
    workload = Workload(prompts=4, rollouts_per_prompt=2)  # up to 600 + 8192 tokens each
    with pytest.raises(ValueError, match="longest context"):
        Simulation(Fleet(engines=2, kv_capacity_tokens=4096), workload, STEPTIME, "adaptive")


@pytest.mark.parametrize("k", [0, 1, 2])
def test_the_pipeline_trains_every_batch_within_its_staleness_bound(k):
    workload = Workload(prompts=4, rollouts_per_prompt=4)
    fleet = Fleet(engines=2, kv_capacity_tokens=longest_context(workload), slow_engines=1)
    result = PipelineSimulation(fleet, workload, STEPTIME, "adaptive").run_pipeline(
        3, LearnerProfile(update_s=20.0, push_s=2.0), k)
    assert result.trajectories == 3 * 16 and result.wall_s > 0
    assert result.staleness_max <= k and 0 <= result.staleness_mean <= k
    assert 0 <= result.engine_idle_share < 1 and 0 <= result.learner_idle_share < 1
