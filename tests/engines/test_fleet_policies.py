"""The scheduling policies' books (``rstar2.engines.fleet.policies``), without engines."""

import pytest

from rstar2.engines.fleet.policies import Scheduler


def submit_all(scheduler, needs):
    for key, need in enumerate(needs):
        scheduler.submit(key, need)


def test_kv_aware_admits_only_what_fits_and_refills_on_release():
    scheduler = Scheduler("kv_aware", [1000, 600])
    submit_all(scheduler, [300] * 8)
    first = scheduler.admit()
    per_member = [sum(1 for _, m in first if m == i) for i in range(2)]
    assert per_member == [3, 2]  # K = free KV // need on each member
    assert all(b.reserved_tokens <= b.capacity_tokens for b in scheduler.members)
    assert scheduler.admit() == []  # nothing fits until something ends
    done, member = first[0]
    scheduler.release(done)
    (again,) = scheduler.admit()
    assert again == (5, member)  # the head of the pool, the moment capacity frees
    assert len(scheduler.pending) == 2


def test_kv_aware_counts_what_the_member_reports_beside_its_own_reservations():
    scheduler = Scheduler("kv_aware", [1000])
    scheduler.report(0, 1000, used_tokens=800)  # another client's requests on a shared server
    submit_all(scheduler, [300])
    assert scheduler.admit() == []
    scheduler.report(0, 1000, used_tokens=0)
    assert scheduler.admit() == [(0, 0)]


def test_an_oversize_trajectory_runs_alone_instead_of_never():
    scheduler = Scheduler("kv_aware", [500])
    submit_all(scheduler, [200, 900, 100])
    assert scheduler.admit() == [(0, 0)]
    scheduler.release(0)
    assert scheduler.admit() == [(1, 0)]  # alone on the member, not before
    assert scheduler.admit() == []


def test_static_deals_round_robin_and_least_loaded_fills_the_emptiest():
    static = Scheduler("static", [100, 100, 100])
    submit_all(static, [1000] * 7)  # no capacity check: everything is launched up front
    assert [m for _, m in static.admit()] == [0, 1, 2, 0, 1, 2, 0]

    least = Scheduler("least_loaded", [100, 100])
    submit_all(least, [10] * 4)
    assert [m for _, m in least.admit()] == [0, 1, 0, 1]
    least.release(0)
    least.release(2)
    least.submit("new", 10)
    assert least.admit() == [("new", 0)]


def test_a_lost_member_returns_its_trajectories_and_gets_no_more():
    scheduler = Scheduler("kv_aware", [1000, 1000])
    submit_all(scheduler, [100] * 4)
    pins = dict(scheduler.admit())
    lost = scheduler.lose(0)
    assert sorted(lost) == sorted(k for k, m in pins.items() if m == 0)
    assert all(scheduler.member_of(k) is None for k in lost)
    for key in lost:
        scheduler.submit(key, 100)
    assert {m for _, m in scheduler.admit()} == {1}
    scheduler.restore(0, 1000)
    scheduler.submit("late", 100)
    assert scheduler.admit() == [("late", 0)]


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="kv_aware"):
        Scheduler("fastest", [1])


def test_the_simulator_runs_these_policies_and_shows_overflow_only_without_kv_awareness():
    from benchmarks.scheduler_sim import Settings, simulate

    tight = Settings(engines=4, prompts=16, rollouts_per_prompt=16, kv_capacity_tokens=40000)
    static, kv_aware = simulate(tight, "static"), simulate(tight, "kv_aware")
    assert static["evictions"] > 0 and static["recomputed_tokens"] > 0
    assert kv_aware["evictions"] == 0 and kv_aware["recomputed_tokens"] == 0
    assert kv_aware["idle_share_last_20pct"] < static["idle_share_last_20pct"]
    ample = Settings(engines=4, prompts=16, rollouts_per_prompt=16)
    assert simulate(ample, "static")["evictions"] == 0
