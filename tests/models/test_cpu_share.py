"""The thread governor: a core given up while other processes keep one busy, given back once
they stop, no flapping on a burst, never above the count it was given; and none where the
user fixed the count."""

import pytest

from rstar2.models.cpu_share import READ_EVERY_S, ThreadGovernor, cores_busy


class Machine:
    """A clock, the cores' busy seconds and this process's CPU seconds, advanced by hand."""

    def __init__(self):
        self.now = self.busy = self.own = 0.0

    def run(self, seconds: float, own_cores: float, other_cores: float) -> None:
        self.now += seconds
        self.own += seconds * own_cores
        self.busy += seconds * (own_cores + other_cores)


def governor(machine: Machine, most: int = 2) -> ThreadGovernor:
    return ThreadGovernor(most, busy=lambda: machine.busy, own=lambda: machine.own, clock=lambda: machine.now)


def counts(gov: ThreadGovernor, machine: Machine, seconds: float, other_cores: float) -> list[int]:
    out = []
    for _ in range(int(seconds / READ_EVERY_S)):
        machine.run(READ_EVERY_S, own_cores=gov.current, other_cores=other_cores)
        out.append(gov.threads())
    return out


def test_a_busy_neighbour_takes_a_thread_and_gives_it_back_when_gone():
    machine = Machine()
    gov = governor(machine)
    assert counts(gov, machine, 5, other_cores=0.0)[-1] == 2
    assert counts(gov, machine, 5, other_cores=1.0)[-1] == 1
    assert counts(gov, machine, 5, other_cores=1.0)[-1] == 1  # stays while the neighbour runs
    assert counts(gov, machine, 5, other_cores=0.0)[-1] == 2


def test_a_short_burst_of_other_work_changes_nothing():
    machine = Machine()
    gov = governor(machine)
    counts(gov, machine, 3, other_cores=0.0)
    seen = counts(gov, machine, READ_EVERY_S, other_cores=1.0) + counts(gov, machine, 3, other_cores=0.1)
    assert set(seen) == {2}


def test_never_more_than_most_nor_fewer_than_one():
    machine = Machine()
    gov = governor(machine, most=4)
    assert max(counts(gov, machine, 5, other_cores=0.0)) == 4
    assert counts(gov, machine, 20, other_cores=8.0)[-1] == 1
    gov.most, gov.current = 3, 3
    assert max(counts(gov, machine, 10, other_cores=0.0)) == 3


def test_readings_are_taken_at_most_twice_a_second():
    machine = Machine()
    gov = governor(machine)
    reads = []
    gov.busy = lambda: reads.append(machine.now) or machine.busy
    for _ in range(100):
        machine.run(0.01, own_cores=2, other_cores=1.0)
        gov.threads()
    assert len(reads) == 2


def test_no_governor_where_the_user_fixed_the_count(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert ThreadGovernor.for_this_process(2) is None
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert ThreadGovernor.for_this_process(1) is None
    assert isinstance(ThreadGovernor.for_this_process(2), ThreadGovernor)


def test_the_cores_busy_time_is_read_from_proc():
    import os

    before = cores_busy(os.sched_getaffinity(0))
    sum(i * i for i in range(2_000_000))  # some work on this core
    assert cores_busy(os.sched_getaffinity(0)) > before > 0
