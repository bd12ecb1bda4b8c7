"""GET /metrics: the merged stats in Prometheus text format, written by prometheus-client.

Built per scrape from the same merged data as /llmsim/stats (`statsview.gather`), so the two
always agree and `--workers N` is covered the same way. Two families of names: `llmsim_*`,
and the vLLM names autoscalers and routers scrape (`vllm:*`, labelled by `model_name`).
Histograms are exported with `EXPORT_BOUNDS`, a subset of the finer internal buckets.
"""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.utils import floatToGoString

from llmsim.observe.stats import BOUNDS
from llmsim.observe.statsview import WEBHOOK_OUTCOMES, combined

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4   # the classic text format vLLM serves
EXPORT_BOUNDS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15,
                 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                 80.0, 150.0, 300.0, 600.0)
_EXPORT = tuple((floatToGoString(b), BOUNDS.index(b)) for b in EXPORT_BOUNDS)


def buckets(hist: dict) -> list[tuple[str, float]]:
    """Cumulative Prometheus buckets of a dense internal histogram."""
    counts = hist["counts"]
    out, cum, upto = [], 0, 0
    for label, index in _EXPORT:
        cum += sum(counts[upto:index + 1])
        upto = index + 1
        out.append((label, cum))
    out.append(("+Inf", cum + sum(counts[upto:])))
    return out


def _histogram(name: str, doc: str, hist: dict, labels=(), values=()) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(values), buckets(hist), hist["sum"])
    return family


def _labelled(cls, name: str, doc: str, label: str, table: dict):
    family = cls(name, doc, labels=[label])
    for key, value in sorted(table.items()):
        family.add_metric([key], value)
    return family


def families(merged: dict, now: float | None = None) -> list:
    now = time.time() if now is None else now
    models = merged["models"]
    endpoints = merged["endpoints"]
    out = [
        GaugeMetricFamily("llmsim_uptime_seconds", "Seconds since the server started",
                          value=now - merged["started"]),
        GaugeMetricFamily("llmsim_workers", "Worker processes reporting", value=merged["workers"]),
        _labelled(CounterMetricFamily, "llmsim_requests", "API requests answered, by endpoint",
                  "endpoint", {k: v[0] for k, v in endpoints.items()}),
        _labelled(CounterMetricFamily, "llmsim_streaming_requests",
                  "Streamed (SSE) API requests answered, by endpoint", "endpoint",
                  {k: v[1] for k, v in endpoints.items()}),
        _labelled(CounterMetricFamily, "llmsim_http_responses", "API responses by status class",
                  "status_class", merged["status"]),
        GaugeMetricFamily("llmsim_requests_active", "API requests in progress", value=merged["active"]),
        GaugeMetricFamily("llmsim_streams_active", "SSE streams in progress",
                          value=merged["active_streams"]),
        CounterMetricFamily("llmsim_websocket_connections", "WebSocket connections accepted",
                            value=merged["ws_connections"]),
        GaugeMetricFamily("llmsim_websocket_connections_active", "WebSocket connections open",
                          value=merged["ws_active"]),
        CounterMetricFamily("llmsim_websocket_turns", "Answers planned on WebSocket connections",
                            value=merged["ws_turns"]),
        _labelled(CounterMetricFamily, "llmsim_tokens", "Tokens in planned answers, by kind", "kind",
                  {kind: sum(m[key] for m in models.values()) for kind, key in
                   (("prompt", "prompt"), ("completion", "completion"), ("reasoning", "reasoning"))}),
        _labelled(CounterMetricFamily, "llmsim_model_requests", "Planned answers per model "
                  "(the first 50 names, then 'other')", "model",
                  {k: m["requests"] for k, m in models.items()}),
    ]
    errors = CounterMetricFamily("llmsim_errors", "Error answers by kind; injected=true for "
                                 "simulated faults", labels=["kind", "injected"])
    for injected, table in (("false", merged["errors"]), ("true", merged["injected"])):
        for kind, value in sorted(table.items()):
            errors.add_metric([kind, injected], value)
    out.append(errors)
    out.append(_labelled(CounterMetricFamily, "llmsim_webhook_deliveries", "Webhook deliveries by "
                         "outcome: queued (an event for one URL), sent (attempts), failed (attempts "
                         "without a 2xx), delivered, dropped (attempts used up)", "outcome",
                         {name: merged["webhooks"].get(name, 0) for name in WEBHOOK_OUTCOMES}))
    out += [
        _histogram("llmsim_time_to_first_token_seconds", "Simulated time to first token",
                   combined(models, "ttft")),
        _histogram("llmsim_inter_token_latency_seconds", "Simulated gap between visible tokens",
                   combined(models, "itl")),
        _histogram("llmsim_request_duration_seconds", "Simulated duration of planned answers",
                   combined(models, "e2e")),
        _histogram("llmsim_http_request_duration_seconds", "Measured duration of API requests",
                   merged["http"]),
        _histogram("llmsim_event_lateness_seconds", "SSE batches: write time minus scheduled time",
                   merged["lateness"]),
    ]
    out += _vllm(models, merged.get("serving", {}))
    return out


def _vllm(models: dict, serving: dict) -> list:
    running = GaugeMetricFamily("vllm:num_requests_running", "Requests being answered",
                                labels=["model_name"])
    waiting = GaugeMetricFamily("vllm:num_requests_waiting", "Requests queued for a slot (0 "
                                "unless the serving model queues them)", labels=["model_name"])
    prompt = CounterMetricFamily("vllm:prompt_tokens", "Prompt tokens", labels=["model_name"])
    generation = CounterMetricFamily("vllm:generation_tokens", "Generated tokens (visible and "
                                     "reasoning)", labels=["model_name"])
    histograms = [HistogramMetricFamily(name, doc, labels=["model_name"]) for name, doc in (
        ("vllm:time_to_first_token_seconds", "Time to first token"),
        ("vllm:inter_token_latency_seconds", "Time between tokens"),
        ("vllm:e2e_request_latency_seconds", "End-to-end request latency"))]
    for name, m in sorted(models.items()):
        slots = serving.get(name)
        running.add_metric([name], m["running"] if slots is None else slots["running"])
        waiting.add_metric([name], 0 if slots is None else slots["waiting"])
        prompt.add_metric([name], m["prompt"])
        generation.add_metric([name], m["completion"] + m["reasoning"])
        for family, key in zip(histograms, ("ttft", "itl", "e2e")):
            family.add_metric([name], buckets(m[key]), m[key]["sum"])
    for name in sorted(set(serving) - set(models)):    # every request so far still queued
        running.add_metric([name], serving[name]["running"])
        waiting.add_metric([name], serving[name]["waiting"])
    cache = [(name, m) for name, m in sorted(serving.items()) if "prefix_queries" in m]
    if not cache:
        return [running, waiting, prompt, generation, *histograms]
    queries = CounterMetricFamily("vllm:prefix_cache_queries", "Prefix cache: input tokens looked up",
                                  labels=["model_name"])
    hits = CounterMetricFamily("vllm:prefix_cache_hits", "Prefix cache: input tokens found cached",
                               labels=["model_name"])
    usage = GaugeMetricFamily("vllm:kv_cache_usage_perc", "Prefix cache blocks in use, a fraction "
                              "of the capacity (1 = full)", labels=["model_name"])
    for name, m in cache:
        queries.add_metric([name], m["prefix_queries"])
        hits.add_metric([name], m["prefix_hits"])
        usage.add_metric([name], m["kv_usage"])
    return [running, waiting, prompt, generation, *histograms, queries, hits, usage]


class _Families:
    def __init__(self, items: list):
        self.items = items

    def collect(self):
        return self.items


def exposition(merged: dict) -> bytes:
    """The Prometheus text exposition of merged stats."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families(merged)))
    return generate_latest(registry)
