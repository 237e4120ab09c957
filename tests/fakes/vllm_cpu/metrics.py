"""The stand-in's load in this process's Prometheus registry, as vLLM's stat logger puts it:
creating an engine first unregisters every ``vllm:`` collector (vLLM's own
``unregister_vllm_metrics``), so the registry holds the newest engine's metrics only, and
vLLM's own reader (``vllm.v1.metrics.reader.get_metrics_snapshot``) reads them back."""

from __future__ import annotations

from prometheus_client.core import (REGISTRY, CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)

BLOCK_SIZE = 16
ENGINE_INDEX = "0"  # one engine per AsyncLLM (no data parallelism), as vLLM labels it


class StandInCollector:
    """Reads the stand-in's ``HFEngine`` load at every scrape."""

    _name = "vllm:stand_in"  # what unregister_vllm_metrics recognises a vLLM collector by

    def __init__(self, llm):
        self.llm = llm

    def collect(self):
        load = self.llm.engine.load()
        preemptions = self.llm.core.preempted + load.preemptions
        blocks = load.kv_capacity_tokens // BLOCK_SIZE
        labels = {"model_name": "stand-in", "engine": ENGINE_INDEX}
        info = GaugeMetricFamily("vllm:cache_config_info", "the cache config",
                                 labels=["block_size", "num_gpu_blocks", "engine"])
        info.add_metric([str(BLOCK_SIZE), str(blocks), ENGINE_INDEX], 1.0)
        yield info
        usage = load.kv_used_tokens / max(blocks * BLOCK_SIZE, 1)
        for name, value in (("vllm:kv_cache_usage_perc", usage),
                            ("vllm:num_requests_running", float(load.running)),
                            ("vllm:num_requests_waiting", float(load.waiting))):
            gauge = GaugeMetricFamily(name, name, labels=list(labels))
            gauge.add_metric(list(labels.values()), value)
            yield gauge
        for name, value in (("vllm:num_preemptions", preemptions),
                            ("vllm:generation_tokens", load.generation_tokens)):
            counter = CounterMetricFamily(name, name, labels=list(labels))
            counter.add_metric(list(labels.values()), value)
            yield counter
        latency = HistogramMetricFamily("vllm:inter_token_latency_seconds", "between tokens",
                                        labels=list(labels))
        latency.add_metric(list(labels.values()), [("+Inf", load.inter_tokens)],
                           load.inter_token_seconds)
        yield latency


def register_metrics(llm) -> None:
    from vllm.v1.metrics.prometheus import unregister_vllm_metrics

    unregister_vllm_metrics()
    REGISTRY.register(StandInCollector(llm))
