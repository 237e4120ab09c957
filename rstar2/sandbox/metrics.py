"""Prometheus metrics of one sandbox service (its own registry, so several can share a process).

What an operator scaling the service out reads (see docs/sandbox-cluster.md):

* ``rstar2_sandbox_worker_busy_seconds_total{worker}`` -- time each worker spent on calls;
  its rate is the worker's busy share (near 1 on every worker: the node is saturated);
* ``rstar2_sandbox_queue_wait_seconds`` -- how long calls waited for a worker (a growing
  tail means callers wait on this node: add workers or nodes);
* ``rstar2_sandbox_workers_busy`` -- workers running a call right now.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from rstar2.sandbox.protocol import RunResult

LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 60.0)
WAIT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 120.0)


class SandboxMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.calls = Counter("rstar2_sandbox_calls", "Calls answered, by outcome.", ["status"], registry=r)
        self.latency = Histogram(
            "rstar2_sandbox_call_seconds", "Execution time of answered calls.", buckets=LATENCY_BUCKETS, registry=r
        )
        self.rejected = Counter("rstar2_sandbox_rejected", "Calls refused with 503 (queue full).", registry=r)
        self.queue_depth = Gauge("rstar2_sandbox_queue_depth", "Calls waiting for a worker.", registry=r)
        self.workers_alive = Gauge("rstar2_sandbox_workers_alive", "Warm workers ready or busy.", registry=r)
        self.restarts = Counter("rstar2_sandbox_worker_restarts", "Workers replaced after dying.", registry=r)
        self.queue_wait = Histogram(
            "rstar2_sandbox_queue_wait_seconds", "Time calls waited in the queue for a worker.",
            buckets=WAIT_BUCKETS, registry=r,
        )
        self.busy_seconds = Counter(
            "rstar2_sandbox_worker_busy_seconds", "Seconds each worker spent running calls (rate = busy share).",
            ["worker"], registry=r,
        )
        self.workers_busy = Gauge("rstar2_sandbox_workers_busy", "Workers running a call right now.", registry=r)

    def observe(self, result: RunResult) -> None:
        self.calls.labels(result.status).inc()
        self.latency.observe(result.duration_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
