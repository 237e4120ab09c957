"""An engine's load read from vLLM's metric names: the Prometheus text a server serves at
``/metrics`` (vLLM, SGLang in vLLM's names, ``rstar2 serve-model``) or in-process vLLM's metrics
snapshot. The fleet's HTTP members and the in-process vLLM engine both report their load
through it, so the scheduler sees one ``EngineLoad`` whatever serves the model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rstar2.engines.base import EngineError, EngineLoad


def parse_vllm_metrics(text: str) -> EngineLoad:
    """An ``EngineLoad`` from Prometheus text with vLLM's metric names (``/metrics``)."""
    from prometheus_client.parser import text_string_to_metric_families

    return load_from_samples((sample.name, sample.labels, sample.value)
                             for family in text_string_to_metric_families(text)
                             for sample in family.samples)


def load_from_samples(samples: Iterable[tuple[str, Mapping[str, str], float]]) -> EngineLoad:
    """An ``EngineLoad`` from (name, labels, value) samples under vLLM's metric names: the
    text of ``/metrics``, or in-process vLLM's ``get_metrics_snapshot()`` (whose counters are
    named without ``_total``). A data-parallel engine reports each engine under its ``engine``
    label; their numbers are added up. Each engine's capacity is the ``kv_cache_size_tokens``
    label of ``vllm:cache_config_info``, else ``num_gpu_blocks`` x ``block_size``; its use is
    ``vllm:kv_cache_usage_perc`` (a fraction) of that. The decode counters are
    ``vllm:generation_tokens_total`` and the sum and count of
    ``vllm:inter_token_latency_seconds`` (``vllm:time_per_output_token_seconds``, its older
    name, where only that one is served)."""
    capacity: dict[str, int] = {}
    usage: dict[str, float] = {}
    counts = {name: 0.0 for name in COUNTED}
    for name, labels, value in samples:
        engine = labels.get("engine", "0")
        name = name.removesuffix("_total")
        if name == "vllm:cache_config_info":
            capacity[engine] = kv_cache_size(labels)
        elif name == "vllm:kv_cache_usage_perc":
            usage[engine] = value
        elif name in counts:
            counts[name] += value
    if not any(capacity.values()):
        raise EngineError("the metrics have no vllm:cache_config_info with the KV cache size")
    used = sum(round(usage.get(engine, 0.0) * size) for engine, size in capacity.items())
    latency = "vllm:inter_token_latency_seconds"
    if not counts[latency + "_count"]:
        latency = "vllm:time_per_output_token_seconds"
    return EngineLoad(kv_capacity_tokens=sum(capacity.values()), kv_used_tokens=used,
                      running=int(counts["vllm:num_requests_running"]),
                      waiting=int(counts["vllm:num_requests_waiting"]),
                      preemptions=int(counts["vllm:num_preemptions"]),
                      generation_tokens=int(counts["vllm:generation_tokens"]),
                      inter_token_seconds=counts[latency + "_sum"],
                      inter_tokens=int(counts[latency + "_count"]))


COUNTED = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_preemptions",
           "vllm:generation_tokens", "vllm:inter_token_latency_seconds_sum",
           "vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_sum",
           "vllm:time_per_output_token_seconds_count")


def kv_cache_size(labels: Mapping[str, str]) -> int:
    """KV tokens of one engine from ``vllm:cache_config_info``'s labels (0 if not given)."""
    size = labels.get("kv_cache_size_tokens")
    if size not in (None, "", "None"):
        return int(float(size))
    blocks = labels.get("num_gpu_blocks")
    if blocks in (None, "", "None"):
        return 0
    return int(blocks) * int(labels.get("block_size") or 16)
