"""The code environment service over HTTP (FastAPI; the OpenAPI schema is at /openapi.json).

* ``POST /run``        one ``RunRequest`` -> one ``RunResult``
* ``POST /run_batch``  ``{"requests": [...]}`` -> ``{"results": [...]}`` in the same order;
  ``?stream=true`` streams ``{"index", "result"}`` lines as calls finish (what the client uses)
* ``GET  /health``     workers alive, queue depth, isolation mode
* ``GET  /metrics``    Prometheus text

When the queue cannot take a request (or a whole batch) the answer is an immediate 503 with
``Retry-After``; clients back off and retry. A request larger than ``max_request_mb`` is
answered 413 unread, a malformed one (a non-finite ``timeout_s``) 422, every error in the
shape ``rstar2.service`` gives all three services; a call whose client disconnects while it
waits in the queue is dropped, and SIGTERM drains within ``drain_timeout_s`` (``run_service``).
"""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response, StreamingResponse

from rstar2.sandbox.isolation import check_isolation
from rstar2.sandbox.metrics import SandboxMetrics
from rstar2.sandbox.pool import PoolConfig, QueueFull, WorkerPool
from rstar2.sandbox.protocol import BatchRequest, BatchResponse, RunRequest, RunResult
from rstar2.service import error_response, guard, run_service

RETRY_AFTER_S = 1
MIB = 1 << 20


def overloaded() -> JSONResponse:
    return error_response(503, "sandbox queue is full; retry later", {"Retry-After": str(RETRY_AFTER_S)})


async def results_as_completed(futures: list[asyncio.Future]):
    """``{"index", "result"}`` lines as calls finish; the calls not yet run are dropped when the
    stream ends early (its client went away)."""
    index = {future: i for i, future in enumerate(futures)}
    pending = set(futures)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                yield json.dumps({"index": index[future], "result": future.result().model_dump()}) + "\n"
    finally:
        for future in pending:
            future.cancel()


def create_app(config: PoolConfig) -> FastAPI:
    """The service; its worker pool starts with the app and dies with it."""
    metrics = SandboxMetrics()
    pool = WorkerPool(config, metrics)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await pool.start()
        try:
            yield
        finally:
            await pool.close()

    app = FastAPI(
        title="rstar2 sandbox",
        description="Isolated, high-throughput execution of model-written Python.",
        lifespan=lifespan,
    )
    guard(app, max_body_bytes=int(config.max_request_mb * MIB), read_timeout_s=config.read_timeout_s)
    app.state.pool = pool

    @app.post("/run", response_model=RunResult, responses={503: {"description": "queue full"}})
    async def run(request: RunRequest):
        try:
            (future,) = pool.submit_many([request])
        except QueueFull:
            return overloaded()
        return await future

    @app.post("/run_batch", response_model=BatchResponse, responses={503: {"description": "queue full"}})
    async def run_batch(batch: BatchRequest, stream: bool = False):
        """All results in order; with ``?stream=true``, one JSON line ``{"index", "result"}``
        per call as soon as it finishes, so one slow call does not hold back the rest."""
        try:
            futures = pool.submit_many(batch.requests)
        except QueueFull:
            return overloaded()
        if stream:
            return StreamingResponse(results_as_completed(futures), media_type="application/x-ndjson")
        return BatchResponse(results=list(await asyncio.gather(*futures)))

    @app.get("/health")
    async def health():
        body = {
            "status": "ok" if pool.alive else "starting",
            "workers_alive": pool.alive,
            "workers": config.workers,
            "queue_depth": pool.queue.qsize(),
            "isolation": "bubblewrap" if config.isolated else "none",
        }
        return JSONResponse(body, status_code=200 if pool.alive else 503)

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    return app


def serve(config: PoolConfig, host: str = "127.0.0.1") -> None:
    """Run the service until interrupted. Refuses to run unisolated unless config says so."""
    if config.isolated:
        check_isolation(config.limits)
    app = create_app(config)
    mode = "bubblewrap isolation" if config.isolated else "NO ISOLATION (unsafe)"
    print(
        f"rstar2 sandbox listening on http://{host}:{config.port} "
        f"({config.workers} workers, {mode}, timeout {config.default_timeout_s:g}s, "
        f"{config.limits.memory_mb} MB per call, requests up to {config.max_request_mb:g} MiB)",
        flush=True,
    )
    run_service(app, host, config.port, config.drain_timeout_s)
