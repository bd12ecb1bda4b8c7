"""Redis out of reach, seen through the official SDK against a live server with a Redis store:
requests that need the store get a quick 503 `service_unavailable` in the provider's envelope
(no hang, no 500, no plain text), streams already running finish, and the server recovers
without a restart when Redis is back."""
from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from conftest import LiveServer
from redisproc import RedisProcess

pytestmark = pytest.mark.live

MODEL = "gpt-4o"
LIMIT_S = 2.0


@pytest.fixture(scope="module")
def redis():
    process = RedisProcess()
    yield process
    process.stop()


@pytest.fixture(scope="module", params=["tuned", "plain"])
def server(redis, request):
    server = LiveServer("--server", request.param, "--store", redis.url, "--ttft-ms", "0", "--tbt-ms", "15", "--target-tokens", "100")
    yield server
    server.stop()


@pytest.fixture
def down(redis):
    """Redis stopped for the test, started again after it."""
    redis.stop()
    yield
    redis.start()


def assert_503(exc: openai.APIStatusError, elapsed: float) -> None:
    assert exc.status_code == 503
    assert exc.response.headers["content-type"].startswith("application/json")
    error = exc.response.json()["error"]
    assert error["code"] == "service_unavailable" and error["type"] == "server_error"
    assert elapsed < LIMIT_S, f"answered after {elapsed:.2f} s"


def test_requests_needing_redis_get_a_quick_503_while_it_is_down(server, redis):
    client = server.client(timeout=10)
    stored = client.responses.create(model=MODEL, input="Keep me.")
    conversation = client.conversations.create()
    redis.stop()
    try:
        calls = {"retrieve": lambda: client.responses.retrieve(stored.id),
                 "input_items": lambda: client.responses.input_items.list(stored.id),
                 "delete": lambda: client.responses.delete(stored.id),
                 "follow-up": lambda: client.responses.create(model=MODEL, input="And?",
                                                              previous_response_id=stored.id),
                 "conversation": lambda: client.conversations.create(),
                 "items": lambda: client.conversations.items.list(conversation.id)}
        slowest = 0.0
        for call in calls.values():
            started = time.monotonic()
            with pytest.raises(openai.APIStatusError) as exc:
                call()
            slowest = max(slowest, time.monotonic() - started)
            assert_503(exc.value, time.monotonic() - started)
        print(f"\nRedis down: {len(calls)} kinds of request got 503 in at most {slowest * 1000:.0f} ms")
        # a plain HTTP client sees the envelope too
        answer = httpx.get(f"{server.base}/responses/{stored.id}", timeout=10)
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "service_unavailable"
        assert answer.headers.get("retry-after")
        # a request that needs no store still works
        chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert chat.choices[0].message.content
    finally:
        redis.start()


def test_a_stream_running_when_redis_goes_down_finishes(server, redis):
    client = server.client(timeout=10)
    events, errors = [], []

    def consume():
        try:
            with client.responses.create(model=MODEL, input="Stream on.", stream=True) as stream:
                for event in stream:
                    events.append(event.type)
        except Exception as exc:    # noqa: BLE001 - reported below
            errors.append(exc)
    reader = threading.Thread(target=consume)
    reader.start()
    deadline = time.monotonic() + 10
    while "response.output_text.delta" not in events and time.monotonic() < deadline:
        time.sleep(0.01)
    redis.stop()
    try:
        reader.join(15)
        assert not errors
        assert events[0] == "response.created" and events[-1] == "response.completed"
        assert events.count("response.output_text.delta") == 100
    finally:
        redis.start()


def test_the_server_recovers_without_a_restart_when_redis_returns(server, redis):
    client = server.client(timeout=10)
    redis.stop()
    with pytest.raises(openai.APIStatusError):
        client.conversations.create()
    redis.start()
    started, refused = time.monotonic(), 0
    while True:             # the first request after the restart may meet a stale connection
        try:
            created = client.responses.create(model=MODEL, input="Back?")
            break
        except openai.APIStatusError:
            refused += 1
            assert time.monotonic() - started < LIMIT_S
    # A pooled connection that went stale with the restart may still refuse one request with
    # a clean 503 (a transaction is not retried on a new connection): the SDK's retry covers it.
    retrying = client.with_options(max_retries=2)
    assert retrying.responses.retrieve(created.id).id == created.id
    assert retrying.conversations.create().id.startswith("conv_")
    print(f"\nRedis back: {refused} requests refused after its restart, then served (no server restart)")
