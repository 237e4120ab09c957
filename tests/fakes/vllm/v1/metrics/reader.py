"""``vllm.v1.metrics.reader.get_metrics_snapshot``: the in-process Prometheus metrics of every
live engine, as vLLM's ``Gauge``/``Counter`` records (counters named without ``_total``)."""

from dataclasses import dataclass


@dataclass
class FakeGauge:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class FakeCounter:
    name: str
    labels: dict[str, str]
    value: int


@dataclass
class FakeHistogram:  # present in vLLM's snapshot; carries no single value
    name: str
    labels: dict[str, str]
    count: int
    sum: float
    buckets: dict[str, int]


def get_metrics_snapshot() -> list:
    import vllm

    collected = []
    for engine in vllm.LIVE_ENGINES:
        collected.extend(engine.metrics())
    return collected
