"""Rate limits as OpenAI counts them, on one live server through the official SDK: token buckets
per (API key, model), OpenAI's x-ratelimit-* headers on every answer, 429 with retry-after when a
bucket is empty, the SDK's retry succeeding once it refills. Each test uses an API key of its
own (its own buckets), with limits from the config file's `rate_limits.keys`."""
from __future__ import annotations

import time

import httpx
import openai
import pytest

from oai_schemas import validate_ws_error

MODEL = "gpt-4o"
TPM = 1000
RETRY_TPM = 12000       # a request costing just over half of it waits about a second for the next
CONFIG = f"""
rate_limits:
  keys:
    tpm-key: {{rpm: null, tpm: {TPM}}}
    retry-key: {{tpm: {RETRY_TPM}}}
    ws-key: {{rpm: 2}}
    large-key: {{tpm: 100}}
"""


@pytest.fixture(scope="module")
def server(live_server_factory, tmp_path_factory):
    config = tmp_path_factory.mktemp("ratelimits") / "llmsim.yaml"
    config.write_text(CONFIG)
    return live_server_factory("--profile", "instant", "--rate-limit-rpm", "5", "--config", str(config))


def client(server, key: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base, api_key=key, **{"max_retries": 0, **kwargs})


def limits(headers) -> dict:
    return {name: value for name, value in headers.items() if name.startswith("x-ratelimit-")}


def test_five_requests_count_down_and_the_sixth_gets_429_with_retry_after(server):
    sdk = client(server, "rpm-key")
    remaining = []
    for _ in range(5):
        raw = sdk.responses.with_raw_response.create(model=MODEL, input="Hi")
        assert raw.headers["x-ratelimit-limit-requests"] == "5"
        remaining.append(raw.headers["x-ratelimit-remaining-requests"])
    with pytest.raises(openai.RateLimitError) as refused:
        sdk.responses.create(model=MODEL, input="Hi")
    assert remaining == ["4", "3", "2", "1", "0"]
    error = refused.value
    assert error.code == "rate_limit_exceeded" and error.type == "requests"
    assert "on requests per min (RPM): Limit 5, Used 5, Requested 1" in error.message
    assert 0 < int(error.response.headers["retry-after"]) <= 12
    assert 0 < int(error.response.headers["retry-after-ms"]) <= 12000
    assert error.response.headers["x-ratelimit-remaining-requests"] == "0"


def test_headers_carry_reset_durations_as_openai_writes_them(server):
    raw = client(server, "reset-key").responses.with_raw_response.create(model=MODEL, input="Hi")
    # one request of 5 per minute: its bucket is full again 12 s later
    assert raw.headers["x-ratelimit-reset-requests"] in ("12s", "11.999s", "11.998s")
    assert "x-ratelimit-limit-tokens" not in raw.headers      # no token limit set for this key


def test_a_stream_carries_the_headers(server):
    raw = client(server, "stream-key").chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], stream=True)
    assert limits(raw.headers)["x-ratelimit-remaining-requests"] == "4"
    assert sum(1 for _ in raw.parse()) > 1


def test_tokens_count_input_plus_max_output_tokens(server):
    sdk = client(server, "tpm-key")
    first = sdk.responses.with_raw_response.create(model=MODEL, input="Hi", max_output_tokens=100)
    used = first.parse().usage.input_tokens + 100
    assert first.headers["x-ratelimit-limit-tokens"] == str(TPM)
    assert int(first.headers["x-ratelimit-remaining-tokens"]) == TPM - used
    assert "x-ratelimit-limit-requests" not in first.headers     # rpm: null for this key
    second = sdk.responses.with_raw_response.create(model=MODEL, input="Hi", max_output_tokens=300)
    # the bucket refills TPM/60 tokens a second meanwhile
    left = int(second.headers["x-ratelimit-remaining-tokens"])
    assert TPM - used - (used + 200) <= left <= TPM - used - (used + 200) + 10


def test_a_request_larger_than_the_token_limit_is_refused_without_retry_after(server):
    with pytest.raises(openai.RateLimitError) as refused:
        client(server, "large-key").responses.create(model=MODEL, input="Hi", max_output_tokens=500)
    assert refused.value.type == "tokens"
    assert refused.value.body["message"].startswith(f"Request too large for {MODEL}")
    assert "retry-after" not in refused.value.response.headers


def test_the_sdk_retry_succeeds_once_the_bucket_refills(server):
    statuses = []
    http = httpx.Client(event_hooks={"response": [lambda r: statuses.append(r.status_code)]})
    sdk = client(server, "retry-key", max_retries=3, http_client=http)
    cap = RETRY_TPM // 2 + 100
    sdk.responses.create(model=MODEL, input="Hi", max_output_tokens=cap)
    began = time.monotonic()
    second = sdk.responses.with_raw_response.create(model=MODEL, input="Hi", max_output_tokens=cap)
    waited = time.monotonic() - began
    assert statuses[0] == 200 and 429 in statuses[1:] and statuses[-1] == 200
    assert second.parse().status == "completed"
    assert waited >= 0.5        # the SDK waited retry-after-ms, the bucket refilled meanwhile


def test_each_websocket_response_create_counts_like_a_request(server):
    sdk = client(server, "ws-key")
    events = []
    with sdk.responses.connect() as conn:
        for _ in range(3):
            conn.response.create(model=MODEL, input="Hi")
            for event in conn:
                if event.type in ("response.completed", "error"):
                    events.append(event)
                    break
    assert [e.type for e in events] == ["response.completed", "response.completed", "error"]
    error = events[-1].to_dict()
    validate_ws_error(error)
    assert error["status"] == 429 and error["error"]["code"] == "rate_limit_exceeded"
