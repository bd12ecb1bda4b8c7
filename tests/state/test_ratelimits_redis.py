"""Two live servers sharing one Redis store (conftest's `redis_url`, a database of this module's
own): one set of rate-limit buckets for both, and PATCH /llmsim/config on one reaching the
other within a second; through the official SDK."""
from __future__ import annotations

import time

import httpx
import openai
import pytest

MODEL = "gpt-4o"
DATABASE = 11


@pytest.fixture(scope="module")
def pair(redis_url, live_server_factory):
    store = redis_url.rsplit("/", 1)[0] + f"/{DATABASE}"
    flags = ("--profile", "instant", "--store", store, "--rate-limit-rpm", "4")
    return live_server_factory(*flags), live_server_factory(*flags)


def sdk(server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base, api_key=key, max_retries=0)


def test_two_servers_count_down_one_shared_bucket(pair):
    first, second = sdk(pair[0], "redis-key"), sdk(pair[1], "redis-key")
    remaining = [client.responses.with_raw_response.create(model=MODEL, input="Hi")
                 .headers["x-ratelimit-remaining-requests"] for client in (first, second, first, second)]
    with pytest.raises(openai.RateLimitError) as refused:
        first.responses.create(model=MODEL, input="Hi")
    assert remaining == ["3", "2", "1", "0"]
    assert int(refused.value.response.headers["retry-after"]) > 0


def live_ttft(server) -> float | None:
    return httpx.get(f"{server.url}/llmsim/config", timeout=10).json()["settings"]["ttft_ms"]


def test_a_patch_on_one_server_reaches_the_other_within_a_second(pair):
    answer = httpx.patch(f"{pair[0].url}/llmsim/config", json={"ttft_ms": 30}, timeout=10)
    assert answer.status_code == 200, answer.text
    patched = time.monotonic()
    try:
        while live_ttft(pair[1]) != 30 and time.monotonic() - patched < 5:
            time.sleep(0.05)
        seen_after = time.monotonic() - patched
        raw = sdk(pair[1], "redis-patch-key").responses.with_raw_response.create(model=MODEL, input="Hi")
    finally:
        httpx.delete(f"{pair[0].url}/llmsim/config", timeout=10)
    assert float(raw.headers["x-llmsim-ttft-ms"]) == 30
    assert seen_after < 2.0     # within a second, and some slack for a busy machine
