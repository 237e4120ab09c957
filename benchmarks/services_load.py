"""The three HTTP services under load with hostile requests mixed in: throughput, tail latency and
memory before and after.

Run:  .venv/bin/python benchmarks/services_load.py                 (about 3 minutes on 2 cores)
      .venv/bin/python benchmarks/services_load.py --seconds 10 --only sandbox

Each service is started as a user starts it (``rstar2 serve-model``, ``rstar2 sandbox serve``,
``rstar2 view`` over a synthetic run folder) in its own process. 16 clients then send, in a
closed loop for ``--seconds``, the requests the service exists for:

* serve-model: a 16-token completion of a 32-token prompt (token ids, as rollouts send them);
* sandbox: ``/run`` of a small program;
* view: the page's own reads (a step's rollouts, one rollout, the metrics).

One third of the way in, one client sends the hostile requests of each service instead (the
ones its hardening refuses: ``n=1000000``, a 10 MB text prompt, a body over the limit, a
non-finite deadline, a lone surrogate, a link out of the run folder) and records each one's
status and time. Beside them it opens the connections that stall (one that sends nothing, half a
header, headers and half a body, a chunked body trickling a byte every half second), each
service being started with ``--read-timeout-s 5``, and records when each is let go; serve-model
also gets one request for the most its default limits allow (``n=32``, ``max_tokens=8000``),
left running while the ordinary clients go on, so their latencies show whether it starves them. Reported per service: answered requests per second, p50 and p99 latency of
the ordinary requests (the hostile ones excluded), failed ordinary requests, the hostile
answers, and the resident memory of the service's whole process tree (workers included)
before the load, just before and just after the hostile requests, and after the load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from rstar2.sandbox.local import free_port
from rstar2.sandbox.worker.procs import parent_pids

CLIENTS = 16
READ_TIMEOUT_S = 5.0
STALLS = {  # what a stalled connection sends, then nothing more
    "stalled: nothing sent": b"",
    "stalled: half a header": b"GET /health HTTP/1.1\r\nHo",
    "stalled: headers and half a body": b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                        b"Content-Length: 100\r\n\r\n{\"code\": ",
}
PROMPT = list(range(1000, 1032))


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and every process below it, MB."""
    parents = parent_pids()
    tree, frontier = [pid], [pid]
    while frontier:
        current = frontier.pop()
        children = [p for p, parent in parents.items() if parent == current]
        tree += children
        frontier += children
    total = 0
    for member in tree:
        try:
            with open(f"/proc/{member}/status") as status:
                total += next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
    return total / 1024


def start(argv: list[str], health: str) -> subprocess.Popen:
    """A service process, once ``health`` answers 200 (and for the sandbox, every worker is warm)."""
    process = subprocess.Popen([sys.executable, "-m", "rstar2", *argv], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{' '.join(argv)} exited with {process.returncode}")
        try:
            answer = httpx.get(health, timeout=2)
            if answer.status_code == 200 and answer.json().get("workers_alive", 1) == answer.json().get("workers", 1):
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{' '.join(argv)} did not start")


def synthetic_run(folder: Path, steps: int = 3, rollouts: int = 64) -> Path:
    """A training-run folder of the shape ``rstar2.training.runlog`` writes, with long responses."""
    (folder / "rollouts").mkdir(parents=True)
    with (folder / "metrics.jsonl").open("w") as metrics:
        for step in range(1, steps + 1):
            metrics.write(json.dumps({"step": step, "reward/accuracy": step / steps}) + "\n")
    for step in range(1, steps + 1):
        with (folder / "rollouts" / f"step_{step}.jsonl").open("w") as rows:
            for i in range(rollouts):
                rows.write(json.dumps({
                    "group": i // 8, "rollout": i % 8, "problem_id": f"p{i // 8}", "gold": "42",
                    "answer": "42", "reward": 1.0, "kept": True, "group_dropped": False,
                    "stop_reason": "stop", "response_tokens": 900, "response": "reasoning " * 900,
                    "tool_calls": [{"code": "print(6 * 7)", "output": "42", "status": "ok", "duration_s": 0.1}],
                }) + "\n")
    (folder / "rollouts" / "step_9.jsonl").symlink_to("/etc/passwd")
    return folder


async def hostile_serve_model(http: httpx.AsyncClient, url: str) -> list:
    return [
        ("n=1000000", await http.post(f"{url}/v1/completions", json={"prompt": PROMPT, "n": 1_000_000, "max_tokens": 1})),
        ("10 MB text prompt", await http.post(f"{url}/v1/completions", json={"prompt": "x" * 10_000_000})),
        ("weights from /etc", await http.post(f"{url}/update_weights_from_disk", json={"model_path": "/etc"})),
    ]


async def hostile_sandbox(http: httpx.AsyncClient, url: str) -> list:
    raw = {"Content-Type": "application/json"}
    return [
        ("10 MB of code", await http.post(f"{url}/run", json={"code": "#" * 10_000_000})),
        ("NaN deadline", await http.post(f"{url}/run", content=b'{"code": "1", "timeout_s": NaN}', headers=raw)),
        ("lone surrogate stdin", await http.post(f"{url}/run", content=json.dumps({"code": "input()", "stdin": "\udfff"}).encode(),
                                                 headers=raw)),
    ]


async def hostile_view(http: httpx.AsyncClient, url: str) -> list:
    return [
        ("step linked to /etc/passwd", await http.get(f"{url}/api/runs/0/steps/9")),
        ("1 MB body", await http.request("GET", f"{url}/api/runs", content=b"x" * (1 << 20))),
        ("no such route", await http.get(f"{url}/api/../../etc/passwd")),
    ]


async def ordinary(http: httpx.AsyncClient, service: str, url: str, turn: int) -> httpx.Response:
    if service == "serve-model":
        return await http.post(f"{url}/v1/completions", json={"prompt": PROMPT, "max_tokens": 16, "ignore_eos": True,
                                                              "stop_token_ids": [], "return_token_ids": True})
    if service == "sandbox":
        return await http.post(f"{url}/run", json={"code": "print(sum(i * i for i in range(1000)))"})
    path = ["/api/runs/0/steps/2", f"/api/runs/0/steps/1/rollouts/{turn % 64}", "/api/runs/0/metrics"][turn % 3]
    return await http.get(url + path)


def answer_message(answer: httpx.Response) -> str:
    """The service's one-line error message (``{"error": {"message": ...}}``), or, where the
    request was answered as a result (a tool call's error output), the start of that result."""
    body = answer.json()
    error = body.get("error") if isinstance(body, dict) else None
    message = error["message"] if isinstance(error, dict) else json.dumps(body)
    return message[:90]


HOSTILE = {"serve-model": hostile_serve_model, "sandbox": hostile_sandbox, "view": hostile_view}


async def stalled(url: str, name: str) -> dict:
    """Open a connection that stalls the way ``name`` says; the seconds until the service lets
    it go, and the status it answered first (None: closed without an answer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
    opened = time.monotonic()
    if name in STALLS:
        writer.write(STALLS[name])
    else:  # a chunked body, one byte every half second
        writer.write(b"POST /run HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")

        async def trickle() -> None:
            while True:
                await asyncio.sleep(0.5)
                writer.write(b"1\r\n \r\n")
                await writer.drain()

        trickling = asyncio.ensure_future(trickle())
    try:
        answer = await asyncio.wait_for(reader.read(), 120)
    except (asyncio.TimeoutError, ConnectionError):
        answer = b"(still open after 120 s)"
    finally:
        if name not in STALLS:
            trickling.cancel()
        writer.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None
    return {"request": name, "status": status, "let_go_after_s": round(time.monotonic() - opened, 2)}


async def stalls(url: str) -> list[dict]:
    names = [*STALLS, "stalled: a chunked body, a byte every 0.5 s"]
    return list(await asyncio.gather(*(stalled(url, name) for name in names)))


async def greedy(http: httpx.AsyncClient, url: str) -> str:
    """The most one request may ask of serve-model under its default limits."""
    answer = await http.post(f"{url}/v1/completions", json={"prompt": PROMPT, "n": 32, "max_tokens": 8000,
                                                            "ignore_eos": True, "stop_token_ids": []})
    return str(answer.status_code)


async def load(service: str, url: str, seconds: float, pid: int) -> dict:
    """16 closed-loop clients for ``seconds``; one sends the hostile requests a third of the way
    in (the service's memory is read just before and just after them)."""
    latencies, beside_hog, failures, hostile, rss = [], [], 0, [], {}
    started = time.monotonic()
    stop = started + seconds
    stalling = asyncio.ensure_future(stalls(url))
    hog = None

    async def client(index: int, http: httpx.AsyncClient) -> None:
        nonlocal failures
        turn = 0
        while time.monotonic() < stop:
            if index == 0 and not hostile and time.monotonic() > started + seconds / 3:
                sent, rss["before_hostile_mb"] = time.monotonic(), round(tree_rss_mb(pid))
                for name, answer in await HOSTILE[service](http, url):
                    hostile.append({"request": name, "status": answer.status_code,
                                    "message": answer_message(answer)})
                hostile.append({"request": "all of them", "seconds": round(time.monotonic() - sent, 2)})
                rss["after_hostile_mb"] = round(tree_rss_mb(pid))
                if service == "serve-model":
                    nonlocal hog
                    hog = asyncio.ensure_future(greedy(http, url))
                    rss["hog_sent_at_s"] = round(time.monotonic() - started, 1)
                continue
            sent = time.monotonic()
            answer = await ordinary(http, service, url, turn)
            latencies.append(time.monotonic() - sent)
            if hog is not None:
                beside_hog.append(latencies[-1])
            failures += answer.status_code != 200
            turn += 1

    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=CLIENTS + 1)) as http:
        await asyncio.gather(*(client(i, http) for i in range(CLIENTS)))
        elapsed = time.monotonic() - started
        if hog is not None:
            state = hog.result() if hog.done() else "still running at the end: cancelled"
            hog.cancel()
            hostile.append({"request": f"n=32, max_tokens=8000 (sent at {rss.pop('hog_sent_at_s')} s)",
                            "status": state, "ordinary_answered_beside_it": len(beside_hog),
                            "their_p99_ms": round(sorted(beside_hog)[int(0.99 * (len(beside_hog) - 1))] * 1000, 1)
                            if beside_hog else None})
    hostile += await stalling
    ordered = sorted(latencies)
    return {"requests_per_s": round(len(ordered) / elapsed, 1), "p50_ms": round(ordered[len(ordered) // 2] * 1000, 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 1),
            "requests": len(ordered), "failed": failures, "hostile": hostile, **rss}


def measure(service: str, seconds: float, folder: Path) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = {"serve-model": lambda: ["serve-model"], "sandbox": lambda: ["sandbox", "serve", "--workers", "4"],
            "view": lambda: ["view", str(synthetic_run(folder / "run"))]}[service]()
    process = start([*argv, "--port", str(port), "--read-timeout-s", str(READ_TIMEOUT_S)], f"{url}/health")
    try:
        before = tree_rss_mb(process.pid)
        result = asyncio.run(load(service, url, seconds, process.pid))
        result.update(rss_before_mb=round(before), rss_after_mb=round(tree_rss_mb(process.pid)))
    finally:
        process.terminate()
        process.wait(60)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="load time per service")
    parser.add_argument("--only", choices=list(HOSTILE), action="append", help="just these services")
    args = parser.parse_args()
    print(f"services_load: {CLIENTS} clients, {args.seconds:g} s per service, {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for service in args.only or list(HOSTILE):
            result = measure(service, args.seconds, Path(tmp))
            print(f"{service:12s} {result['requests_per_s']:7.1f} req/s  p50 {result['p50_ms']:8.1f} ms  "
                  f"p99 {result['p99_ms']:8.1f} ms  failed {result['failed']}/{result['requests']}  "
                  f"RSS {result['rss_before_mb']} -> {result['rss_after_mb']} MB (around the hostile "
                  f"requests {result['before_hostile_mb']} -> {result['after_hostile_mb']})", flush=True)
            for answer in result["hostile"]:
                print(f"{'':12s} hostile: {json.dumps(answer)}", flush=True)


if __name__ == "__main__":
    main()
