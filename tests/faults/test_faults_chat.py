"""Injected faults on Chat Completions, through the official SDK against the shared live server."""
from __future__ import annotations

import openai
import pytest

import oai_schemas

FAULT = "x-llmsim-fault"
ARGS = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say something."}]}


def fault(value: str) -> dict:
    return {"extra_headers": {FAULT: value}}


@pytest.mark.parametrize("value, error, status, code", [
    ("rate_limit", openai.RateLimitError, 429, "rate_limit_exceeded"),
    ("insufficient_quota", openai.RateLimitError, 429, "insufficient_quota"),
    ("overloaded", openai.InternalServerError, 503, "overloaded"),
    ("context_length", openai.BadRequestError, 400, "context_length_exceeded"),
])
def test_chat_immediate_faults(client, value, error, status, code):
    with pytest.raises(error) as caught:
        client.chat.completions.create(**ARGS, **fault(value))
    assert (caught.value.status_code, caught.value.code) == (status, code)


def test_chat_context_length_names_messages(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**ARGS, **fault("context_length"))
    assert caught.value.param == "messages"


@pytest.mark.parametrize("value", ["stream_failed;after_tokens=3", "stream_error;after_tokens=3",
                                   "server_error;after_tokens=3"])
def test_chat_stream_gets_an_error_frame_after_k_tokens(client, value):
    stream = client.chat.completions.create(**ARGS, stream=True, **fault(value))
    chunks = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            chunks.append(chunk)
    for chunk in chunks:
        oai_schemas.validate_chat_chunk(chunk.model_dump(exclude_unset=True))
    assert sum(1 for c in chunks for choice in c.choices if choice.delta.content) == 3
    assert caught.value.message == "The server had an error while processing your request. Sorry about that!"
    assert caught.value.body["type"] == "server_error"


def test_chat_stream_error_frame_then_done_on_the_wire(server):
    import httpx

    from sse import parse
    response = httpx.post(f"{server.base}/chat/completions", json={**ARGS, "stream": True},
                          headers={FAULT: "stream_error;after_tokens=1"})
    events = parse(response.text)
    assert events[-1] == (None, "[DONE]")
    assert set(events[-2][1]) == {"error"}
    oai_schemas.validate_error_body(events[-2][1])


def test_chat_stream_drop_is_a_connection_error(client):
    stream = client.chat.completions.create(**ARGS, stream=True, **fault("stream_drop;after_tokens=2"))
    with pytest.raises(openai.APIConnectionError):
        for _ in stream:
            pass


def test_chat_content_filter(client):
    completion = client.chat.completions.create(**ARGS, **fault("content_filter;after_tokens=3"))
    assert completion.choices[0].finish_reason == "content_filter"
    assert completion.usage.completion_tokens == 3


def test_chat_stream_content_filter_finishes_with_content_filter(client):
    stream = client.chat.completions.create(**ARGS, stream=True, **fault("content_filter;after_tokens=2"))
    chunks = list(stream)
    reasons = [choice.finish_reason for c in chunks for choice in c.choices if choice.finish_reason]
    assert reasons == ["content_filter"]
    assert sum(1 for c in chunks for choice in c.choices if choice.delta.content) == 2
