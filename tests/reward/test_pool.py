"""The deadline pool on real processes: kills overruns, survives crashes, keeps order."""

import os
import time
from pathlib import Path

import pytest

from rstar2.reward.pool import DeadlinePool


def test_outcomes_come_back_in_input_order():
    with DeadlinePool("math:sqrt", workers=2) as pool:
        outcomes = pool.map([(float(n),) for n in range(20)])
    assert [o.value for o in outcomes] == [n**0.5 for n in range(20)]
    assert not any(o.timed_out or o.error for o in outcomes)


def test_an_overrunning_call_is_killed_at_the_deadline_and_the_pool_carries_on():
    with DeadlinePool("time:sleep", workers=1, deadline_s=0.5) as pool:
        started = time.monotonic()
        outcomes = pool.map([(60,), (0,), (60,), (0,)])
        elapsed = time.monotonic() - started
    assert [o.timed_out for o in outcomes] == [True, False, True, False]
    assert all(0.5 <= o.seconds < 1.5 for o in outcomes if o.timed_out)
    assert elapsed < 10  # two kills, not two minutes of sleep


def test_a_cpu_limit_kills_a_call_that_computes_too_long_but_not_one_that_waits():
    """The CPU limit bounds the work a call does: a call that computes past it is killed, one
    that spends longer on the clock without computing (as a check starved of CPU on a loaded
    machine does) is not; the wall-clock deadline still bounds both."""
    with DeadlinePool("tests.reward.busy:spin", workers=1, deadline_s=30, cpu_limit_s=0.3) as pool:
        (computing,) = pool.map([(5.0,)])
        (short,) = pool.map([(0.05,)])
    with DeadlinePool("time:sleep", workers=1, deadline_s=30, cpu_limit_s=0.3) as pool:
        (waiting,) = pool.map([(1.0,)])
    assert computing.timed_out and computing.cpu_seconds is None
    assert computing.seconds < 5.0  # killed long before its five CPU seconds
    assert not waiting.timed_out and waiting.seconds >= 1.0
    assert waiting.cpu_seconds < 0.3
    assert 0.05 <= short.value <= short.cpu_seconds


def test_rejects_a_cpu_limit_beyond_the_deadline():
    with pytest.raises(ValueError, match="cpu_limit_s"):
        DeadlinePool("math:sqrt", deadline_s=1.0, cpu_limit_s=2.0)


def test_an_exception_is_an_outcome_not_a_raise():
    with DeadlinePool("math:sqrt", workers=1) as pool:
        bad, good = pool.map([(-1.0,), (4.0,)])
    assert bad.error == "ValueError: math domain error" and bad.value is None
    assert good.value == 2.0


def test_a_dying_worker_is_reported_and_replaced():
    with DeadlinePool("os:_exit", workers=1) as pool:
        outcomes = pool.map([(3,), (4,)])
    assert [o.error for o in outcomes] == [
        "worker died with exit code 3",
        "worker died with exit code 4",
    ]


def _is_running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie (a killed worker is reaped lazily)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_a_killed_worker_is_gone_and_replaced():
    with DeadlinePool("time:sleep", workers=1, deadline_s=0.3) as pool:
        (first,) = pool.worker_pids
        (outcome,) = pool.map([(60,)])
        assert outcome.timed_out
        deadline = time.monotonic() + 5  # SIGKILL is delivered asynchronously
        while _is_running(first) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not _is_running(first)
        assert pool.worker_pids != [first]
        assert pool.map([(0,)])[0].error is None


def test_runaway_allocation_hits_the_memory_limit():
    with DeadlinePool("os:urandom", workers=1, memory_limit_mb=1024) as pool:
        (outcome,) = pool.map([(4 * 1024**3,)])
    assert outcome.error is not None and outcome.error.startswith(("MemoryError", "OverflowError"))


def test_calls_run_in_parallel_on_all_workers():
    with DeadlinePool("time:sleep", workers=2, deadline_s=5.0) as pool:
        started = time.monotonic()
        pool.map([(0.6,)] * 4)
        elapsed = time.monotonic() - started
    assert elapsed < 4 * 0.6


def test_a_worker_that_cannot_start_is_an_error_of_the_pool():
    with pytest.raises(RuntimeError, match="exited"):
        DeadlinePool("math:no_such_function", workers=1)


def test_closing_stops_every_worker():
    pool = DeadlinePool("math:sqrt", workers=2)
    pids = pool.worker_pids
    pool.close()
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)
    with pytest.raises(RuntimeError, match="closed"):
        pool.map([(1.0,)])


def test_an_interrupted_map_leaves_no_call_behind():
    def interrupt(index, outcome):
        raise KeyboardInterrupt

    with DeadlinePool("time:sleep", workers=2, deadline_s=30) as pool:
        with pytest.raises(KeyboardInterrupt):
            pool.map([(0,), (60,), (60,)], on_outcome=interrupt)
        started = time.monotonic()
        assert [o.error for o in pool.map([(0,), (0,)])] == [None, None]
        assert time.monotonic() - started < 5


def test_rejects_a_nonpositive_deadline():
    with pytest.raises(ValueError, match="deadline_s"):
        DeadlinePool("math:sqrt", deadline_s=0)


def test_pool_made_before_a_fork_is_left_to_its_owner():
    pool = DeadlinePool("math:sqrt", workers=1)
    child = os.fork()
    if child == 0:
        pool.close()  # must not kill the parent's workers
        os._exit(0)
    os.waitpid(child, 0)
    assert pool.map([(9.0,)])[0].value == 3.0
    pool.close()
