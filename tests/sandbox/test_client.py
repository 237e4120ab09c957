"""SandboxClient: batching of concurrent calls, several servers, loud failure."""

import asyncio

import pytest

from rstar2.sandbox import RunRequest, SandboxClient, SandboxUnavailable, local_sandbox
from rstar2.sandbox.local import free_port


async def test_concurrent_calls_are_batched_and_answered_in_place(sandbox_url):
    async with SandboxClient(sandbox_url, max_batch=8) as client:
        sent = []
        original = client.stream_batch

        async def spy(unanswered):
            sent.append(len(unanswered))
            return await original(unanswered)

        client.stream_batch = spy
        results = await asyncio.gather(*(client.run(f"print({i} ** 2)") for i in range(20)))
    assert [r.stdout for r in results] == [f"{i ** 2}\n" for i in range(20)]
    assert sum(sent) == 20 and max(sent) == 8 and len(sent) < 20


async def test_run_many_keeps_order_and_outcomes(sandbox_url):
    requests = [RunRequest(code="print(input()[::-1])", stdin="abc"), RunRequest(code="1/0"),
                RunRequest(code="while True: pass", timeout_s=0.3)]
    async with SandboxClient(sandbox_url) as client:
        results = await client.run_many(requests)
    assert [r.status for r in results] == ["ok", "error", "timeout"]
    assert results[0].stdout == "cba\n"


async def test_calls_spread_over_servers_and_survive_one_down():
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with local_sandbox(workers=1) as first, local_sandbox(workers=1) as second:
        async with SandboxClient([dead, first, second], max_batch=4, backoff_s=0.01) as client:
            served = []
            original = client.open_stream

            def spy(url, body):
                served.append(url)
                return original(url, body)

            client.open_stream = spy
            results = await asyncio.gather(*(client.run(f"print({i})") for i in range(40)))
            first_wave = len(served)
            again = await asyncio.gather(*(client.run(f"print({i})") for i in range(40)))
    assert [r.stdout for r in results + again] == [f"{i}\n" for i in range(40)] * 2
    assert served.count(first) > 0 and served.count(second) > 0
    assert dead not in served[first_wave:]  # marked down after failing, not retried for every batch


async def test_unreachable_service_raises_instead_of_faking_output():
    dead = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    async with SandboxClient(dead, retries=2, backoff_s=0.01) as client:
        with pytest.raises(SandboxUnavailable, match="no sandbox server reachable"):
            await client.run("print(1)")


def test_client_needs_a_url():
    with pytest.raises(ValueError):
        SandboxClient([])


async def test_a_slow_call_does_not_hold_back_its_batch(sandbox_url):
    async with SandboxClient(sandbox_url) as client:
        async def timed(code, timeout_s=None):
            started = asyncio.get_running_loop().time()
            result = await client.run(code, timeout_s=timeout_s)
            return result, asyncio.get_running_loop().time() - started

        (slow, slow_s), (fast, fast_s) = await asyncio.gather(
            timed("while True: pass", timeout_s=2.0), timed("print('quick')")
        )
    assert slow.status == "timeout" and fast.stdout == "quick\n"
    assert fast_s < 1.0 < slow_s  # same batch, but answered as soon as it finished
