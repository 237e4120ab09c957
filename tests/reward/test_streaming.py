"""Grading at step scale: many callers share one pool, each rollout graded as it ends."""

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from rstar2.reward import Grader
from rstar2.reward.pool import DeadlinePool
from tests.reward.conftest import GENEROUS_DEADLINE_S
from tests.reward.data import read_rows
from tests.reward.test_grading import HOSTILE_ANSWERS


def real_outputs(samples, n: int) -> list[tuple[str, str]]:
    """Qwen2.5-Math outputs on MATH, with the gold in `\\boxed{}` so that most need sympy."""
    rows = read_rows(samples / "math_cot_samples" / "qwen25_math_cot_100x8.jsonl")[:n]
    return [(row["response"], f"\\boxed{{{row['answer']}}}") for row in rows]


def test_streamed_parallel_grades_equal_the_serial_ones(samples, grader):
    pairs = real_outputs(samples, 96)
    with Grader(workers=1, deadline_s=GENEROUS_DEADLINE_S) as serial:
        expected = serial.grade_many(pairs, require_answer_tag=False)
    assert 20 < sum(g.correct for g in expected) < len(pairs)  # both verdicts occur

    async def as_rollouts_end():  # one awaited grade per rollout, all in flight at once
        return await asyncio.gather(*(grader.grade(r, g, require_answer_tag=False) for r, g in pairs))

    assert asyncio.run(as_rollouts_end()) == expected
    futures = [grader.submit(r, g, require_answer_tag=False) for r, g in pairs]
    assert [f.result() for f in futures] == expected
    with ThreadPoolExecutor(8) as threads:  # the trainer's per-rollout grade_many from threads
        per_thread = list(threads.map(lambda p: grader.grade_many([p], require_answer_tag=False)[0], pairs))
    assert per_thread == expected


def test_deadline_kills_hold_when_hostile_answers_stream_in_beside_real_ones(samples):
    pairs = real_outputs(samples, 24)
    with Grader(workers=2, deadline_s=1.0) as grader:
        grader.compare_many([("1", "\\frac{2}{2}")])  # pool started before timing
        started = time.monotonic()
        hostile = [grader.submit_answer(answer, "\\frac{1}{7}") for answer in HOSTILE_ANSWERS.values()]
        real = [grader.submit(r, g, require_answer_tag=False) for r, g in pairs]
        hostile_grades = [f.result() for f in hostile]
        real_grades = [f.result() for f in real]
        elapsed = time.monotonic() - started
    assert not any(g.correct for g in hostile_grades)
    assert sum(g.timed_out for g in hostile_grades) >= 3  # the ones sympy cannot finish in 1 s
    assert not any(g.timed_out for g in real_grades) and any(g.correct for g in real_grades)
    # six hostile answers on two workers: at most three deadlines each, plus slack for a busy machine
    assert elapsed < 3 * 1.0 + 6.0


def test_callers_in_many_threads_share_the_workers():
    with DeadlinePool("time:sleep", workers=4, deadline_s=5.0) as pool:
        pool.map([(0,)] * 4)
        started = time.monotonic()
        with ThreadPoolExecutor(4) as threads:
            list(threads.map(lambda _: pool.map([(0.5,)]), range(4)))
        elapsed = time.monotonic() - started
    assert elapsed < 4 * 0.5 - 0.3  # not one caller after another


def test_a_submitted_call_is_killed_at_the_deadline_and_others_go_on():
    with DeadlinePool("time:sleep", workers=1, deadline_s=0.5) as pool:
        slow, quick = pool.submit((60,)), pool.submit((0,))
        assert slow.result(timeout=10).timed_out
        assert quick.result(timeout=10).error is None and not quick.result().timed_out


def test_closing_fails_the_calls_still_waiting():
    pool = DeadlinePool("time:sleep", workers=1, deadline_s=30)
    running, queued = pool.submit((60,)), pool.submit((0,))
    time.sleep(0.2)
    pool.close()
    for future in (running, queued):
        assert isinstance(future.exception(timeout=10), RuntimeError)
