"""Fixtures of the reward tests: a real grader pool shared by the session."""

import pytest

from rstar2.reward import Grader

GENEROUS_DEADLINE_S = 20.0
"""Data tests check verdicts, not speed: on a loaded 2-core machine a legitimate symbolic
check (a sum over k, say) can take several times its unloaded time, and the default 2 s
deadline would turn it into a timeout. Deadlines have their own tests in test_grading."""


@pytest.fixture(scope="session")
def grader():
    """A grader with two worker processes (the machine's cores), stopped after the session."""
    with Grader(workers=2, deadline_s=GENEROUS_DEADLINE_S) as grader:
        yield grader
