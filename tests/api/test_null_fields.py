"""An explicit `null` for an optional field is taken as absent, as OpenAI does, on every
endpoint and at any depth: the openai SDK sends `None` as `null` (`user=None`), and
llama-index's `OpenAIResponses` sends a body full of them. A `null` for a required field is
still refused, naming the field. Both servers (the fast lane and connexion) answer alike."""
from __future__ import annotations

import httpx
import openai
import pytest

ON_BOTH_SERVERS = True
HELLO = [{"role": "user", "content": "hi"}]


def test_user_null_is_accepted_on_every_openai_endpoint(client):
    assert client.responses.create(model="gpt-5", input="hi", user=None).output_text
    assert client.chat.completions.create(model="gpt-4o", messages=HELLO, user=None).choices[0].message.content
    assert client.completions.create(model="gpt-3.5-turbo-instruct", prompt="hi", user=None).choices[0].text
    assert client.embeddings.create(model="text-embedding-3-small", input="hi", user=None).data
    assert client.moderations.create(input="hi", model=None).results        # its only optional field


def test_a_llama_index_responses_body_is_answered(server):
    """What llama-index-llms-openai's OpenAIResponses sends on every call."""
    body = {"model": "gpt-4o-mini", "input": [{"role": "user", "content": "hi"}], "include": None,
            "instructions": None, "max_output_tokens": None, "metadata": None, "previous_response_id": None,
            "store": False, "temperature": 0.1, "top_p": 1.0, "truncation": "disabled", "user": None,
            "tools": [], "parallel_tool_calls": True, "reasoning": None, "text": None, "stream": False}
    response = httpx.post(f"{server.base}/responses", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["instructions"] is None


def test_nulls_nested_in_items_and_options_are_absent_too(server):
    body = {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": None},
            "messages": [{"role": "user", "content": "hi", "name": None}], "tools": None, "stop": None}
    with httpx.stream("POST", f"{server.base}/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert b"data: [DONE]" in response.read()


def test_a_null_required_field_is_still_refused(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=None)
    assert caught.value.body["param"] == "messages"
