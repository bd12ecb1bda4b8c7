"""POST /responses without streaming, through the official SDK against a live server: the
response object, its ids, and the request parameters it echoes."""
from __future__ import annotations

import re

import pytest

from our_spec import check_exchange, check_response_body

ON_BOTH_SERVERS = True     # each test runs on `--server tuned` and `--server plain` (conftest)


def create_raw(client, **params):
    """Create a response; return (parsed SDK object, raw JSON body), both checked against
    our document and OpenAI's."""
    raw = client.responses.with_raw_response.create(**params)
    check_exchange(raw.http_response)
    body = raw.http_response.json()
    check_response_body(body)
    return raw.parse(), body


def test_create_returns_a_completed_response_object(client):
    response, body = create_raw(client, model="gpt-4o", input="Say hello")
    assert re.fullmatch(r"resp_[0-9a-f]+", response.id)
    assert body["object"] == "response"
    assert response.status == "completed"
    assert body["error"] is None and body["incomplete_details"] is None


def test_message_item_has_msg_id_and_output_text_part(client):
    response, body = create_raw(client, model="gpt-4o", input="Say hello")
    [item] = body["output"]
    assert re.fullmatch(r"msg_[0-9a-f]+", item["id"])
    assert (item["type"], item["role"], item["status"]) == ("message", "assistant", "completed")
    [part] = item["content"]
    assert part["type"] == "output_text" and part["text"]
    assert part["annotations"] == [] and part["logprobs"] == []


def test_ids_differ_between_responses(client):
    first, _ = create_raw(client, model="gpt-4o", input="a")
    second, _ = create_raw(client, model="gpt-4o", input="a")
    assert first.id != second.id
    assert first.output[0].id != second.output[0].id


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4.1-mini", "claude-sonnet-4-5", "gemini-2.5-flash",
                                   "deepseek-chat"])
def test_model_is_echoed_as_requested(client, model):
    response, _ = create_raw(client, model=model, input="hi")
    assert response.model == model


def test_output_text_is_the_message_text(client):
    response, body = create_raw(client, model="gpt-4o", input="hi")
    assert body["output_text"] == body["output"][0]["content"][0]["text"]
    assert response.output_text == body["output_text"]


def test_request_parameters_are_echoed(client):
    params = dict(instructions="Be brief.", metadata={"team": "qa", "run": "7"}, temperature=0.25,
                  top_p=0.5, parallel_tool_calls=False, store=False, truncation="auto",
                  user="user-42", service_tier="flex", max_output_tokens=500, background=False,
                  text={"format": {"type": "json_object"}, "verbosity": "low"}, top_logprobs=3, max_tool_calls=4,
                  prompt_cache_retention="24h")
    _, body = create_raw(client, model="gpt-4o", input="hi", **params)
    for name, value in params.items():
        assert body[name] == value, name


def test_unset_parameters_get_openai_defaults(client):
    _, body = create_raw(client, model="gpt-4o", input="hi")
    assert body["temperature"] == 1.0 and body["top_p"] == 1.0
    assert body["tool_choice"] == "auto" and body["tools"] == []
    assert body["metadata"] == {} and body["instructions"] is None
    assert body["parallel_tool_calls"] is True and body["store"] is True
    assert body["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert body["truncation"] == "disabled" and body["prompt_cache_retention"] is None
    assert "user" not in body


TOOLS = {
    "function": {"type": "function", "name": "get_weather", "description": "Weather for a city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}, "strict": True},
    "web_search": {"type": "web_search"},
    "web_search_preview": {"type": "web_search_preview"},
    "file_search": {"type": "file_search", "vector_store_ids": ["vs_123"]},
    "code_interpreter": {"type": "code_interpreter", "container": {"type": "auto"}},
    "mcp": {"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.example.com/sse",
            "headers": {"Authorization": "Bearer secret"}, "require_approval": "never"},
    "image_generation": {"type": "image_generation"},
}


@pytest.mark.parametrize("kind", sorted(TOOLS))
def test_tool_of_every_type_is_accepted_and_echoed(client, kind):
    response, body = create_raw(client, model="gpt-4o", input="hi", tools=[TOOLS[kind]])
    assert body["tools"] == [TOOLS[kind]]
    assert response.tools[0].type == kind


def test_mcp_tool_keeps_server_url_and_headers(client):
    response, _ = create_raw(client, model="gpt-4o", input="hi", tools=[TOOLS["mcp"]])
    tool = response.tools[0]
    assert tool.server_url == "https://mcp.example.com/sse"
    assert tool.headers == {"Authorization": "Bearer secret"}


@pytest.mark.parametrize("choice", ["auto", "none", "required",
                                    {"type": "function", "name": "get_weather"}])
def test_tool_choice_forms_are_echoed(client, choice):
    _, body = create_raw(client, model="gpt-4o", input="hi", tools=[TOOLS["function"]],
                         tool_choice=choice)
    assert body["tool_choice"] == choice


def test_max_output_tokens_cuts_the_text_and_marks_the_response_incomplete(client):
    response, body = create_raw(client, model="gpt-4o", input="hi", max_output_tokens=7)
    assert response.status == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["usage"]["output_tokens"] == 7
    assert body["output"][0]["status"] == "incomplete"
    assert body["completed_at"] is None


def test_max_output_tokens_above_the_text_length_completes(client):
    response, body = create_raw(client, model="gpt-4o", input="hi", max_output_tokens=5000)
    assert response.status == "completed"
    assert body["usage"]["output_tokens"] == 100  # the default target length


def test_created_and_completed_timestamps_are_unix_seconds(client):
    import time
    response, body = create_raw(client, model="gpt-4o", input="hi")
    assert abs(body["created_at"] - time.time()) < 60
    assert body["completed_at"] >= body["created_at"]
