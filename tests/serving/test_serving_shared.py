"""The serving model's prefix cache is shared as the store is: by the workers of a host (the
LMDB store `--workers N` use) and by hosts sharing a Redis store (docs/serving-model.md)."""
from __future__ import annotations

import uuid

from openai import OpenAI

BLOCK = 16


def prompt() -> str:
    return f"{uuid.uuid4().hex} " + " ".join(f"word{i % 97}" for i in range(600))


def cached(base_url: str, text: str) -> int:
    """cached_tokens of one request on a new client (a new connection: any worker may answer)."""
    with OpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        answer = client.responses.create(model="gpt-4o", input=text)
    return answer.usage.input_tokens_details.cached_tokens


def test_the_workers_of_a_host_share_one_prefix_cache(live_server_factory):
    server = live_server_factory("--profile", "instant", "--workers", "2", "--prefix-cache")
    text = prompt()
    assert cached(server.base, text) == 0
    again = [cached(server.base, text) for _ in range(8)]
    assert all(n >= 600 and n % BLOCK == 0 for n in again), again
    server.stop()


def test_hosts_sharing_a_redis_store_share_one_prefix_cache(live_server_factory, redis_url):
    first = live_server_factory("--profile", "instant", "--store", redis_url, "--prefix-cache")
    second = live_server_factory("--profile", "instant", "--store", redis_url, "--prefix-cache")
    text = prompt()
    assert cached(first.base, text) == 0
    assert cached(second.base, text) >= 600
    first.stop()
    second.stop()
