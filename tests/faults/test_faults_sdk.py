"""Injected faults as the official SDK sees them, against live servers."""
from __future__ import annotations

import time

import openai
import pytest

from llmsim.faults.kinds import load_kinds

KINDS = load_kinds()
FAULT = "x-llmsim-fault"
ARGS = {"model": "gpt-4o-mini", "input": "Say something."}
# The SDK's exception class for each status an immediate fault answers with.
SDK_ERRORS = {400: openai.BadRequestError, 401: openai.AuthenticationError,
              403: openai.PermissionDeniedError, 404: openai.NotFoundError,
              429: openai.RateLimitError, 500: openai.InternalServerError,
              502: openai.InternalServerError, 503: openai.InternalServerError,
              504: openai.InternalServerError}
IMMEDIATE = sorted(name for name, kind in KINDS.items() if kind.effect in ("error", "timeout"))


ON_BOTH_SERVERS = True     # each test runs on `--server tuned` and `--server plain` (conftest)


def fault(value: str) -> dict:
    return {"extra_headers": {FAULT: value}}


@pytest.mark.parametrize("name", IMMEDIATE)
def test_sdk_raises_the_matching_exception_per_kind(client, name):
    kind = KINDS[name]
    with pytest.raises(SDK_ERRORS[kind.status]) as caught:
        client.responses.create(**ARGS, **fault(f"{name};timeout_after_ms=1"))
    assert caught.value.status_code == kind.status
    assert caught.value.code == kind.code
    assert caught.value.type == kind.type


def test_sdk_retry_honours_retry_after(live_server_factory):
    """A schedule in the config fails the first request with retry_after=1; an SDK client with
    one retry waits about that long and then gets the answer."""
    server = live_server_factory("--profile", "instant", "--fault-schedule",
                                 "[{kind: rate_limit, count: 1, retry_after: 1}]")
    client = openai.OpenAI(base_url=server.base, api_key="sk-test", max_retries=1)
    started = time.monotonic()
    response = client.responses.create(**ARGS)
    elapsed = time.monotonic() - started
    assert response.status == "completed"
    assert 0.9 <= elapsed < 5


def test_without_retries_the_scheduled_fault_surfaces(live_server_factory):
    server = live_server_factory("--profile", "instant", "--fault-schedule",
                                 "[{kind: service_unavailable, count: 1}]")
    client = server.client()
    with pytest.raises(openai.InternalServerError) as caught:
        client.responses.create(**ARGS)
    assert caught.value.status_code == 503
    assert client.responses.create(**ARGS).status == "completed"


def test_timeout_fault_really_waits(client):
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError) as caught:
        client.responses.create(**ARGS, **fault("timeout;timeout_after_ms=800"))
    elapsed = time.monotonic() - started
    assert caught.value.status_code == 504
    assert 0.75 <= elapsed < 5


def test_responses_stream_sees_response_failed(client):
    with client.responses.stream(**ARGS, **fault("stream_failed;after_tokens=3")) as stream:
        events = list(stream)
        with pytest.raises(RuntimeError):
            stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds.count("response.output_text.delta") == 3
    assert kinds[-1] == "response.failed"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error"


def test_responses_stream_sees_an_error_event(client):
    with client.responses.stream(**ARGS, **fault("stream_error;after_tokens=2")) as stream:
        events = list(stream)
    assert events[-1].type == "error"
    assert events[-1].code == "server_error"
    assert [e.type for e in events].count("response.output_text.delta") == 2


def test_stream_drop_is_a_connection_error(client):
    stream = client.responses.create(**ARGS, stream=True, **fault("stream_drop;after_tokens=3"))
    seen = []
    with pytest.raises(openai.APIConnectionError):
        for event in stream:
            seen.append(event.type)
    assert seen.count("response.output_text.delta") == 3


def test_drop_without_streaming_is_a_connection_error(client):
    with pytest.raises(openai.APIConnectionError):
        client.responses.create(**ARGS, **fault("stream_drop"))


def test_content_filter_through_the_sdk(client):
    response = client.responses.create(**ARGS, **fault("content_filter;after_tokens=4"))
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "content_filter"
    assert response.usage.output_tokens == 4


def test_api_keys_through_the_sdk(live_server_factory):
    server = live_server_factory("--profile", "instant", "--api-key", "sk-right")
    with pytest.raises(openai.AuthenticationError) as caught:
        server.client().models.list()
    assert caught.value.code == "invalid_api_key"
    right = openai.OpenAI(base_url=server.base, api_key="sk-right", max_retries=0)
    assert right.models.list().data
