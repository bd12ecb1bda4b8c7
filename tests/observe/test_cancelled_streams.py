"""A stream its client leaves counts what was sent, as an engine counts what it generated
before the abort: vllm:generation_tokens_total, the end-to-end histogram, the inter-token
samples, /llmsim/stats and the trace file, on both servers. A stream read to its end counts
whole (the control)."""
from __future__ import annotations

import json

import httpx
import pytest

from conftest import model_metrics, wait_for

TTFT_MS, TBT_MS, TOKENS, READ = 50, 20, 50, 7
FULL_S = (TTFT_MS + (TOKENS - 1) * TBT_MS) / 1000


@pytest.fixture(scope="module", params=["tuned", "plain"])
def traced(request, live_server_factory, tmp_path_factory):
    path = tmp_path_factory.mktemp("cancelled") / "trace.jsonl"
    server = live_server_factory("--ttft-ms", str(TTFT_MS), "--tbt-ms", str(TBT_MS), "--target-tokens", str(TOKENS),
                                 "--trace", str(path), "--server", request.param)
    server.trace_path = path
    return server


SERIES = ("vllm:generation_tokens_total", "vllm:e2e_request_latency_seconds_sum",
          "vllm:inter_token_latency_seconds_count")


def settled(server, model: str, requests: int) -> list[dict]:
    """The trace lines of `model` once `requests` of them are written."""
    def lines():
        text = server.trace_path.read_text() if server.trace_path.exists() else ""
        found = [line for line in map(json.loads, text.splitlines()) if line["model"] == model]
        return found if len(found) >= requests else None
    return wait_for(lines, timeout=10) or []


def test_a_stream_left_after_a_few_tokens_counts_only_those(traced):
    client = traced.client()
    with client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                        stream=True) as stream:
        deltas = 0
        for chunk in stream:
            deltas += bool(chunk.choices and chunk.choices[0].delta.content)
            if deltas == READ:
                break
    [line] = settled(traced, "gpt-4o-mini", 1)
    generated, e2e, gaps = model_metrics(traced.url, "gpt-4o-mini", *SERIES)
    assert READ <= generated < TOKENS / 2, generated
    assert e2e < FULL_S / 2 and gaps < TOKENS / 2 - 1
    assert READ <= line["tokens"]["completion"] == generated
    assert line["duration_ms"] < FULL_S * 1000 / 2
    stats = httpx.get(traced.url + "/llmsim/stats").json()["models"]["gpt-4o-mini"]
    assert stats["completion_tokens"] == generated


def test_a_stream_read_to_its_end_counts_whole(traced):
    client = traced.client()
    for _ in client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                            stream=True):
        pass
    [line] = settled(traced, "gpt-4o", 1)
    generated, e2e, gaps = model_metrics(traced.url, "gpt-4o", *SERIES)
    assert generated == line["tokens"]["completion"] == TOKENS
    assert e2e == pytest.approx(FULL_S) and gaps == TOKENS - 1
