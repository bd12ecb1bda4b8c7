"""`--workers 2`: one rate limit for both workers, and PATCH /llmsim/config reaching both, on a
live server through the official SDK. Each request goes on a connection of its own, so the
kernel spreads them over the two workers (SO_REUSEPORT): ten requests all answered by one
worker would be one chance in 512 (five: one in 16)."""
from __future__ import annotations

import time

import httpx
import openai
import pytest

MODEL = "gpt-4o"
SPREAD = 10             # requests on fresh connections, to reach both workers


@pytest.fixture(scope="module")
def server(live_server_factory):
    server = live_server_factory("--profile", "instant", "--workers", "2", "--rate-limit-rpm", "5")
    deadline = time.monotonic() + 60
    while httpx.get(f"{server.url}/llmsim/stats", timeout=10).json()["workers"] < 2:   # both are up
        assert time.monotonic() < deadline, "the second worker did not start"
        time.sleep(0.1)
    return server


def fresh(server, key: str) -> openai.OpenAI:
    """A client whose every request opens a connection of its own."""
    http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
    return openai.OpenAI(base_url=server.base, api_key=key, max_retries=0, http_client=http)


def patch(server, body) -> httpx.Response:
    return httpx.patch(f"{server.url}/llmsim/config", json=body, timeout=10)


def test_five_requests_over_two_workers_count_down_and_the_sixth_gets_429(server):
    sdk = fresh(server, "workers-key")
    remaining = [sdk.responses.with_raw_response.create(model=MODEL, input="Hi")
                 .headers["x-ratelimit-remaining-requests"] for _ in range(5)]
    with pytest.raises(openai.RateLimitError) as refused:
        sdk.responses.create(model=MODEL, input="Hi")
    assert remaining == ["4", "3", "2", "1", "0"]
    assert int(refused.value.response.headers["retry-after"]) > 0


def test_patch_changes_the_ttft_of_later_requests_on_both_workers(server):
    sdk = fresh(server, "patch-key")
    before = sdk.responses.with_raw_response.create(model=MODEL, input="Hi")
    assert float(before.headers["x-llmsim-ttft-ms"]) == 0
    answer = patch(server, {"ttft_ms": 40, "rate_limit_rpm": 1000})
    assert answer.status_code == 200, answer.text
    assert answer.json()["settings"]["ttft_ms"] == 40
    try:
        ttfts = [float(sdk.responses.with_raw_response.create(model=MODEL, input="Hi")
                       .headers["x-llmsim-ttft-ms"]) for _ in range(SPREAD)]
        config = [httpx.get(f"{server.url}/llmsim/config", timeout=10,
                            headers={"connection": "close"}).json()["settings"]["ttft_ms"] for _ in range(SPREAD)]
    finally:
        assert httpx.delete(f"{server.url}/llmsim/config", timeout=10).status_code == 200
    assert ttfts == [40.0] * SPREAD
    assert config == [40] * SPREAD


def test_delete_undoes_the_runtime_changes_on_both_workers(server):
    sdk = fresh(server, "delete-key")
    assert patch(server, {"target_tokens": 3, "rate_limit_rpm": 1000}).status_code == 200
    assert sdk.responses.create(model=MODEL, input="Hi").usage.output_tokens == 3
    undone = httpx.delete(f"{server.url}/llmsim/config", timeout=10)
    assert undone.status_code == 200 and undone.json()["changed"] == {}
    lengths = [sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
               .usage.completion_tokens for _ in range(4)]
    assert lengths == [100] * 4       # the start-up target, on whichever worker answers


def test_patched_fault_rates_apply_on_both_workers_until_deleted(server):
    sdk = fresh(server, "faults-key")
    assert patch(server, {"errors": {"server_error": 1}, "rate_limit_rpm": 1000}).status_code == 200
    try:
        failed = 0
        for _ in range(SPREAD):
            with pytest.raises(openai.InternalServerError):
                sdk.responses.create(model=MODEL, input="Hi")
            failed += 1
    finally:
        assert httpx.delete(f"{server.url}/llmsim/config", timeout=10).status_code == 200
    assert failed == SPREAD
    assert sdk.responses.create(model=MODEL, input="Hi").status == "completed"


def test_a_bad_patch_gets_a_400_envelope_naming_the_setting(server):
    bad = patch(server, {"generator": "shakespeare"})
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["param"] == "generator" and error["type"] == "invalid_request_error"
    assert error["message"].startswith("PATCH /llmsim/config: at generator: 'shakespeare' is not one of")


def test_a_patch_of_a_setting_that_cannot_change_is_refused(server):
    bad = patch(server, {"port": 1})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "port"
    assert "cannot change at runtime" in bad.json()["error"]["message"]
