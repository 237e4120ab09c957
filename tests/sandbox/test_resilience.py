"""A dying worker is replaced and its call answered; overload is refused at once, not queued forever."""

import asyncio
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from rstar2.sandbox import SandboxClient, local_sandbox
from tests.polling import until
from tests.sandbox.helpers import busy_workers, run
from tests.sandbox.procs import descendants, parent_of, service_pid, wait_until_gone, worker_pids


def wait_for_workers(url: str, n: int, wait_s: float = 60.0) -> None:
    deadline = time.monotonic() + wait_s
    while httpx.get(f"{url}/health").json()["workers_alive"] < n:
        assert time.monotonic() < deadline, "workers were not replaced"
        time.sleep(0.1)


# From outside its PID namespace only SIGKILL reaches the worker (it is the namespace's init);
# a crash of its bubblewrap parent (SIGSEGV) takes it down too.
@pytest.mark.parametrize("target, sig", [("worker", signal.SIGKILL), ("bubblewrap", signal.SIGSEGV)])
def test_worker_killed_from_outside_is_replaced_and_call_answered_killed(target, sig):
    with local_sandbox(workers=1) as url:
        (worker,) = worker_pids(url)
        victim = worker if target == "worker" else parent_of(worker)
        async def call_and_kill():
            async with httpx.AsyncClient(timeout=60) as client:
                pending = asyncio.create_task(client.post(f"{url}/run", json={"code": "import time; time.sleep(30)", "timeout_s": 30}))
                await until(lambda: busy_workers(url) == 1, what="the call running")
                os.kill(victim, sig)
                return (await pending).json()
        answer = asyncio.run(call_and_kill())
        assert answer["status"] == "killed" and "worker" in answer["stderr"]
        wait_for_workers(url, 1)
        assert run(url, "print('back')").stdout == "back\n"
        assert worker_pids(url) != [worker]
        assert "rstar2_sandbox_worker_restarts_total 1.0" in httpx.get(f"{url}/metrics").text


def test_worker_dying_while_idle_is_replaced_before_the_next_call():
    with local_sandbox(workers=1) as url:
        (worker,) = worker_pids(url)
        os.kill(worker, signal.SIGKILL)
        time.sleep(0.2)
        assert run(url, "print('ran')").stdout == "ran\n"  # run by the new worker, not answered killed
        wait_for_workers(url, 1)
        assert worker_pids(url) != [worker]


def test_full_queue_answers_503_with_retry_after_and_the_client_backs_off():
    with local_sandbox(workers=1, queue_size=2) as url:
        slow = {"code": "import time; time.sleep(1.5)"}
        async def scenario():
            async with httpx.AsyncClient(timeout=60) as http:
                busy = asyncio.create_task(http.post(f"{url}/run_batch", json={"requests": [slow] * 2}))
                await until(lambda: busy_workers(url) == 1, what="the first batch running")
                started = time.monotonic()
                refused = await http.post(f"{url}/run_batch", json={"requests": [slow] * 2})
                refused_after = time.monotonic() - started
                async with SandboxClient(url, backoff_s=0.05) as client:
                    waited = await client.run("print('eventually')")
                return refused, refused_after, waited, (await busy).json()
        refused, refused_after, waited, busy = asyncio.run(scenario())
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        assert refused_after < 0.5  # refused at once, not after waiting
        assert waited.stdout == "eventually\n"  # the client backed off and got through
        assert [r["status"] for r in busy["results"]] == ["ok", "ok"]
        assert "rstar2_sandbox_rejected_total" in httpx.get(f"{url}/metrics").text


def test_serve_refuses_to_run_without_bubblewrap(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no bwrap on this PATH
    done = subprocess.run([sys.executable, "-m", "rstar2", "sandbox", "serve", "--port", "1"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2
    assert "bubblewrap" in done.stderr and "--unsafe-no-isolation" in done.stderr


@pytest.mark.slow
def test_ten_thousand_queued_calls_all_answered():
    with local_sandbox(workers=2) as url:
        async def flood():
            async with SandboxClient(url, max_concurrency=10_000, max_batch=500) as client:
                return await asyncio.gather(*(client.run(f"print({i} * 2)") for i in range(10_000)))
        results = asyncio.run(flood())
        assert [r.stdout for r in results] == [f"{i * 2}\n" for i in range(10_000)]
        assert run(url, "print('still serving')").stdout == "still serving\n"


def test_stopping_the_service_leaves_no_process_or_zombie():
    with local_sandbox(workers=2) as url:
        run(url, "import subprocess; subprocess.Popen(['sleep', '600'], start_new_session=True)")
        below = set(descendants(service_pid(url)))
        assert len(below) >= 4  # two bubblewraps, two workers (and maybe the sleeper, until cleaned up)
    assert wait_until_gone(below) == []


def test_unsafe_mode_runs_and_kills_detached_children():
    with local_sandbox(workers=1, unsafe_no_isolation=True) as url:
        assert httpx.get(f"{url}/health").json()["isolation"] == "none"
        code = "import os, time\npid = os.fork()\nif pid == 0:\n    os.setsid()\n    time.sleep(600)\nprint(pid)"
        sleeper = int(run(url, code).stdout)
        (worker,) = worker_pids(url)
        assert wait_until_gone([sleeper]) == []  # the detached sleeper was found and killed
        assert len(descendants(worker)) <= 1  # nothing left but the child forked for the next call


def test_unsafe_mode_kills_the_detached_child_of_a_process_the_call_left_running():
    """The leftover process is killed first; its detached child then becomes the worker's
    orphan, alive, and must be killed too, not waited for (which would stall the worker)."""
    with local_sandbox(workers=1, unsafe_no_isolation=True) as url:
        code = (
            "import os, time\n"
            "r, w = os.pipe()\n"
            "if os.fork() == 0:\n"
            "    pid = os.fork()\n"
            "    if pid == 0:\n"
            "        os.setsid()\n"
            "        time.sleep(600)\n"
            "    os.write(w, str(pid).encode())\n"
            "    time.sleep(600)\n"
            "os.close(w)\n"
            "print(os.read(r, 32).decode())"
        )
        detached = int(run(url, code).stdout)
        assert wait_until_gone([detached]) == []
        assert run(url, "print('next')").stdout == "next\n"  # the worker is not stuck waiting
