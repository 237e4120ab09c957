"""The scheduling policies' decisions (``rstar2.fleet.policies`` and ``.adaptive``) on
small hand-made cases, without engines: what the scheduler is told is what a fleet tells it
(submissions, turn boundaries, members' readings)."""

import pytest

from rstar2.engines.base import EngineLoad
from rstar2.fleet.scheduler import Scheduler

PROMPT = 100


def submit_all(scheduler, needs, group=None):
    for key, need in enumerate(needs):
        scheduler.submit(key, need, PROMPT, group)


def reading(capacity=1000, **counters):
    return EngineLoad(kv_capacity_tokens=capacity, kv_used_tokens=counters.pop("used", 0),
                      running=counters.pop("running", 4), waiting=counters.pop("waiting", 0),
                      **counters)


def measure(scheduler, seconds_per_token, rounds=3, capacity=1000):
    """Readings in which member i decoded 100 tokens per interval at ``seconds_per_token[i]``
    each, with 4, 5, 6... sequences running (the same on every member)."""
    for r in range(rounds):
        for member, seconds in enumerate(seconds_per_token):
            tokens = 100 * (r + 1)
            scheduler.report(member, reading(capacity, running=4 + r, inter_tokens=tokens,
                                             inter_token_seconds=tokens * seconds))


def teach_lengths(scheduler, responses, group="taught"):
    """Rollouts that ran and ended with these response lengths."""
    for i, response in enumerate(responses):
        key = ("taught", group, i)
        scheduler.submit(key, PROMPT + 1000, PROMPT, group)
        (admitted,) = [k for k, _ in scheduler.admit() if k == key]
        scheduler.end_turn(admitted, PROMPT + response)
        scheduler.release(admitted, finished=True)


# ----------------------------------------------------------------- the simple policies
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
    scheduler.report(0, reading(used=800))  # another client's requests on a shared server
    submit_all(scheduler, [300])
    assert scheduler.admit() == []
    scheduler.report(0, reading(used=0))
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


@pytest.mark.parametrize("policy", ["kv_aware", "adaptive"])
def test_a_lost_member_returns_its_trajectories_and_gets_no_more(policy):
    scheduler = Scheduler(policy, [1000, 1000])
    submit_all(scheduler, [100] * 4)
    pins = dict(scheduler.admit())
    lost = scheduler.lose(0)
    assert sorted(lost) == sorted(k for k, m in pins.items() if m == 0) and lost
    assert all(scheduler.member_of(k) is None for k in lost)
    for key in lost:
        scheduler.submit(key, 100)
    assert {m for _, m in scheduler.admit()} == {1}
    scheduler.restore(0, 1000)
    scheduler.submit("late", 100)
    assert scheduler.admit() == [("late", 0)]


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="adaptive"):
        Scheduler("fastest", [1])


# ----------------------------------------------------------------- adaptive
def test_adaptive_deals_like_static_while_no_rollout_has_ended():
    scheduler = Scheduler("adaptive", [1000, 1000])
    submit_all(scheduler, [PROMPT + 4000] * 10)  # ten budgets of 4000 tokens on 2 x 1000 KV
    assert [m for _, m in scheduler.admit()] == [0, 1] * 5  # nothing predicted: no hold-back


def test_adaptive_books_the_predicted_peak_and_holds_back_after_a_preemption_storm():
    scheduler = Scheduler("adaptive", [1000])
    teach_lengths(scheduler, [200] * 8)  # responses end near 200 tokens, budget 1000
    submit_all(scheduler, [PROMPT + 1000] * 4)
    assert len(scheduler.admit()) == 4  # booked by prediction, not by the 1100-token need
    booked = scheduler.members[0].reserved_tokens
    assert 4 * (PROMPT + 128) <= booked <= 4 * (PROMPT + 200)

    for preempted in (0, 3, 6, 9, 12, 15, 18, 21, 24, 27):  # the member keeps preempting
        scheduler.report(0, reading(used=990, running=4, preemptions=preempted))
    scheduler.submit("more", PROMPT + 1000, PROMPT)
    assert scheduler.admit() == []  # its fill target fell below what it already holds
    for key in range(4):
        scheduler.end_turn(key, PROMPT + 200)
        scheduler.release(key, finished=True)
    submit_all(scheduler, [PROMPT + 1000] * 20)
    resumed = scheduler.admit()
    assert 1 <= len(resumed) <= 4  # room again, for what the lowered target allows


def test_adaptive_booking_shrinks_during_a_tool_wait_and_grows_back():
    scheduler = Scheduler("adaptive", [1000])
    teach_lengths(scheduler, [600] * 8)
    scheduler.submit("a", PROMPT + 1000, PROMPT, "g")
    assert scheduler.admit() == [("a", 0)]
    generating = scheduler.members[0].reserved_tokens
    assert generating >= PROMPT + 512  # its predicted growth is booked
    scheduler.end_turn("a", PROMPT + 300)  # a tool call: only the context it holds
    assert scheduler.members[0].reserved_tokens == PROMPT + 300
    assert scheduler.begin_turn("a", PROMPT + 320) == 0  # back from the tool: growth again
    assert scheduler.members[0].reserved_tokens > PROMPT + 320


def test_adaptive_places_fewer_on_a_slow_member_and_moves_its_trajectories_at_a_tool_call():
    scheduler = Scheduler("adaptive", [10_000] * 4)
    measure(scheduler, [0.01, 0.01, 0.01, 0.02])  # member 3 decodes 2x slower
    submit_all(scheduler, [PROMPT + 1000] * 14)
    counts = [0] * 4
    for _, member in scheduler.admit():
        counts[member] += 1
    assert counts == [4, 4, 4, 2]  # trajectories x slowness kept even

    slow = [key for key, books in scheduler.pinned.items() if books.member == 3]
    fast = [key for key, books in scheduler.pinned.items() if books.member == 0]
    scheduler.end_turn(slow[0], PROMPT + 200)
    scheduler.end_turn(fast[0], PROMPT + 200)
    assert scheduler.begin_turn(fast[0], PROMPT + 280) == 0  # a fast member keeps its own
    moved_to = scheduler.begin_turn(slow[0], PROMPT + 280)  # re-prefilled on a fast one
    assert moved_to in (0, 1, 2) and scheduler.pinned[slow[0]].moves == 1
    assert slow[0] in scheduler.members[moved_to].trajectories
    assert slow[0] not in scheduler.members[3].trajectories


def feed(scheduler, member, running, seconds, tokens=10):
    """A first reading, then one per interval in which ``member`` decoded ``tokens`` at
    ``seconds[i]`` each; ``running`` is the gauge at each reading (one more than intervals)."""
    for i, gauge in enumerate(running):
        scheduler.report(member, reading(running=gauge, inter_tokens=tokens * i,
                                         inter_token_seconds=tokens * sum(seconds[:i])))


def test_adaptive_names_a_slow_member_read_only_at_other_loads_than_the_fast_one():
    """A fast member idle at each reading and a slow one always busy: the load effect is read
    from each member's own readings, so the slow one is not taken for the fast one under load,
    and one slow interval of the fast member does not turn the verdict."""
    scheduler = Scheduler("adaptive", [10_000] * 2)
    feed(scheduler, 0, [0, 0, 0, 0], [0.1] * 3)
    feed(scheduler, 1, [1, 2, 2, 1], [0.3] * 3)
    assert scheduler.policy.slowness(0) == 1
    assert scheduler.policy.slowness(1) == pytest.approx(3.0)

    scheduler = Scheduler("adaptive", [10_000] * 2)
    feed(scheduler, 0, [0, 0, 0, 0, 1, 0], [0.108, 0.107, 0.117, 0.247, 0.131])
    feed(scheduler, 1, [1, 1, 2, 1], [0.357, 0.359, 0.298])
    assert scheduler.policy.slowness(0) == 1 and scheduler.policy.slowness(1) > 1.5

    scheduler = Scheduler("adaptive", [10_000] * 2)  # one speed, read at different loads
    feed(scheduler, 0, [1, 1, 2, 2, 3, 3], [0.1 * (1 + 0.5 * r) for r in (1, 1.5, 2, 2.5, 3)])
    feed(scheduler, 1, [4, 4, 5, 5, 6, 6], [0.1 * (1 + 0.5 * r) for r in (4, 4.5, 5, 5.5, 6)])
    assert scheduler.policy.slowness(0) == scheduler.policy.slowness(1) == 1


def test_adaptive_never_moves_between_members_of_one_speed():
    scheduler = Scheduler("adaptive", [10_000] * 3)
    measure(scheduler, [0.010, 0.011, 0.0105])  # within measurement noise of each other
    submit_all(scheduler, [PROMPT + 1000] * 6)
    pins = dict(scheduler.admit())
    for key, member in pins.items():
        scheduler.end_turn(key, PROMPT + 100)
        assert scheduler.begin_turn(key, PROMPT + 180) == member
