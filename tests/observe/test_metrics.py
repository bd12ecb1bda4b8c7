"""GET /metrics: Prometheus text that prometheus-client parses, with the vLLM names, agreeing
with /llmsim/stats (one private live server with fixed timing, driven through the SDK)."""
from __future__ import annotations

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

VLLM = {"vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:prompt_tokens": "counter", "vllm:generation_tokens": "counter"}
TTFT_S, GAP_S, TOKENS = 0.2, 0.02, 5


@pytest.fixture(scope="module")
def server(live_server_factory):
    server = live_server_factory("--ttft-ms", "200", "--tbt-ms", "20", "--target-tokens", str(TOKENS))
    client = server.client()
    client.responses.create(model="gpt-4o-mini", input="hi")
    for _ in client.responses.create(model="gpt-4o", input="hi", stream=True):
        pass
    client.responses.create(model="o3", input="Think.", reasoning={"effort": "low"})
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="hi")
    return server


def scrape(server, path: str = "/metrics") -> dict:
    response = httpx.get(server.url + path)
    assert response.status_code == 200
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def total(family, suffix: str = "", **labels) -> float:
    """Sum of a family's samples named `family.name + suffix` whose labels include `labels`."""
    return sum(s.value for s in family.samples if s.name == family.name + suffix
               and all(s.labels.get(k) == v for k, v in labels.items()))


def test_exposition_is_prometheus_text(server):
    response = httpx.get(server.url + "/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert list(text_string_to_metric_families(response.text))


def test_vllm_names_are_exposed_with_their_types(server):
    families = scrape(server)
    for name, kind in VLLM.items():
        assert families[name].type == kind, name
    models = {s.labels["model_name"] for s in families["vllm:prompt_tokens"].samples}
    assert models == {"gpt-4o-mini", "gpt-4o", "o3"}


def test_token_counters_agree_with_stats(server):
    families = scrape(server)
    stats = httpx.get(server.url + "/llmsim/stats").json()
    tokens = stats["tokens"]
    assert total(families["vllm:prompt_tokens"], "_total") == tokens["prompt"]
    assert total(families["vllm:generation_tokens"], "_total") == tokens["completion"] + tokens["reasoning"]
    llmsim_tokens = families["llmsim_tokens"]
    for kind in ("prompt", "completion", "reasoning"):
        assert total(llmsim_tokens, "_total", kind=kind) == tokens[kind]


def test_request_and_error_counters_agree_with_stats(server):
    families = scrape(server)
    stats = httpx.get(server.url + "/llmsim/stats").json()
    assert total(families["llmsim_requests"], "_total", endpoint="responses") == \
        stats["endpoints"]["responses"]["requests"] == 4
    assert total(families["llmsim_streaming_requests"], "_total", endpoint="responses") == 1
    assert total(families["llmsim_errors"], "_total", kind="model_not_found", injected="false") == 1
    assert total(families["llmsim_http_responses"], "_total", status_class="4xx") == 1
    per_model = {s.labels["model"]: s.value for s in families["llmsim_model_requests"].samples}
    assert per_model == {name: m["requests"] for name, m in stats["models"].items()}


def test_gauges_are_zero_at_rest(server):
    families = scrape(server)
    assert total(families["vllm:num_requests_running"]) == 0
    assert total(families["vllm:num_requests_waiting"]) == 0
    assert total(families["llmsim_requests_active"]) == 0


def test_histograms_hold_the_simulated_timing(server):
    families = scrape(server)
    ttft = families["vllm:time_to_first_token_seconds"]
    answers = 3                                     # the failed request was never planned
    assert total(ttft, "_count") == answers
    assert total(ttft, "_bucket", le="0.15") == 0   # everything at 0.2 s
    assert total(ttft, "_bucket", le="0.2") == answers
    assert total(ttft, "_sum") == pytest.approx(answers * TTFT_S)
    gaps = families["vllm:inter_token_latency_seconds"]
    assert total(gaps, "_count", model_name="gpt-4o") == TOKENS - 1
    assert total(gaps, "_sum", model_name="gpt-4o") == pytest.approx((TOKENS - 1) * GAP_S)
    e2e = families["vllm:e2e_request_latency_seconds"]
    assert total(e2e, "_sum", model_name="gpt-4o") == pytest.approx(TTFT_S + (TOKENS - 1) * GAP_S)
    buckets = [s.value for s in e2e.samples if s.name.endswith("_bucket")
               and s.labels["model_name"] == "gpt-4o"]
    assert buckets == sorted(buckets) and buckets[-1] == 1      # cumulative, +Inf last


def test_llmsim_metrics_path_serves_the_same_families(server):
    assert set(scrape(server, "/llmsim/metrics")) == set(scrape(server))
