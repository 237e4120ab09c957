"""What the service adds for scale: a child forked ahead of each call, operator metrics, and
calls of a killed service retried elsewhere, none lost and none answered twice."""

import asyncio
import os
import signal
import time

import httpx

from rstar2.sandbox import SandboxClient, local_sandbox
from tests.polling import until
from tests.sandbox.helpers import metric, run
from tests.sandbox.procs import descendants, service_pid, worker_pids


def standby_of(worker: int, wait_s: float = 10.0, replacing: int | None = None) -> int:
    """The one child a worker keeps forked ahead of its next call (waits for it to appear).
    ``replacing``: the previous one, which lingers a moment after its answer (the worker kills
    and reaps it after answering, then forks the next)."""
    deadline = time.monotonic() + wait_s
    while len(children := descendants(worker)) != 1 or children[0] == replacing:
        assert time.monotonic() < deadline, f"worker has {children} below it, not one new standby child"
        time.sleep(0.02)
    return children[0]


def test_each_call_runs_in_a_child_forked_before_it_arrived():
    with local_sandbox(workers=1, unsafe_no_isolation=True) as url:  # host pids: comparable
        (worker,) = worker_pids(url)
        waiting = standby_of(worker)
        assert int(run(url, "import os; print(os.getpid())").stdout) == waiting
        following = standby_of(worker, replacing=waiting)
        assert not os.path.exists(f"/proc/{waiting}")  # killed and reaped before the next was forked
        os.kill(following, signal.SIGKILL)  # a standby killed from outside is replaced, not fatal
        time.sleep(0.2)
        assert run(url, "print('ran')").stdout == "ran\n"
        assert worker_pids(url) == [worker]


def test_metrics_show_worker_busy_time_and_queue_wait(sandbox_url):
    before = httpx.get(f"{sandbox_url}/metrics").text
    requests = [{"code": "import time; time.sleep(0.2)"}] * 6  # two workers: four calls wait
    httpx.post(f"{sandbox_url}/run_batch", json={"requests": requests}, timeout=60).raise_for_status()
    after = httpx.get(f"{sandbox_url}/metrics").text
    busy = metric(after, "rstar2_sandbox_worker_busy_seconds_total")
    busy_before = metric(before, "rstar2_sandbox_worker_busy_seconds_total")
    assert set(busy) == {'worker="0"', 'worker="1"'}
    assert sum(busy.values()) - sum(busy_before.values()) >= 6 * 0.2
    waits = metric(after, "rstar2_sandbox_queue_wait_seconds_count")[""] - \
        metric(before, "rstar2_sandbox_queue_wait_seconds_count").get("", 0.0)
    assert waits == 6
    waited = metric(after, "rstar2_sandbox_queue_wait_seconds_sum")[""] - \
        metric(before, "rstar2_sandbox_queue_wait_seconds_sum").get("", 0.0)
    assert waited >= 0.2 * 4  # the calls that waited for a busy worker
    assert metric(after, "rstar2_sandbox_workers_busy")[""] == 0


async def test_a_service_killed_mid_burst_loses_no_call_and_answers_none_twice():
    with local_sandbox(workers=1) as doomed, local_sandbox(workers=1) as survivor:
        victim = service_pid(doomed)
        async with SandboxClient([doomed, survivor], max_batch=4, backoff_s=0.05) as client:
            answers: list[str] = []

            async def call(i: int) -> None:
                result = await client.run(f"import time; time.sleep(0.02); print({i})")
                answers.append(result.stdout)

            burst = asyncio.gather(*(call(i) for i in range(120)))
            await until(lambda: len(answers) >= 4, what="the burst under way")
            os.kill(victim, signal.SIGKILL)
            answered_at_kill = len(answers)
            await burst
        served = metric(httpx.get(f"{survivor}/metrics").text, "rstar2_sandbox_calls_total")
    assert sorted(answers) == sorted(f"{i}\n" for i in range(120))  # each call answered once, its own
    assert 0 < answered_at_kill < 120  # killed mid-burst
    assert served['status="ok"'] < 120  # the killed service had answered its share until then
