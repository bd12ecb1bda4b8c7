"""Content faults (the model's own mistakes) and the per-request seed, through the official SDK
against a live server."""
from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from oai_schemas import validate_chat_chunk, validate_chat_completion, validate_response_event

MODEL = "gpt-4o"
FAULT = "x-llmsim-fault"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city", "days"], "additionalProperties": False}
TOOLS_CHAT = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
TOOLS_RESP = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]
REFUSAL = "I'm sorry, but I can't help with that request."     # the refusal kind's message


def fault(kind: str, **headers) -> dict:
    return {"extra_headers": {FAULT: kind, **headers}}


@pytest.fixture(scope="module")
def server(live_server_factory):
    return live_server_factory("--profile", "instant", "--target-tokens", "40", "--generator", "random")


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def chat(client, kind: str, **kwargs):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Weather?"}],
                                          **fault(kind), **kwargs)


# ---- refusal ---------------------------------------------------------------------------
def test_refusal_is_a_responses_refusal_part(client):
    response = client.responses.create(model=MODEL, input="hi", **fault("refusal"))
    [item] = response.output
    assert [(p.type, p.refusal) for p in item.content] == [("refusal", REFUSAL)]
    assert response.output_text == ""


def test_refusal_streams_refusal_events(client):
    events = list(client.responses.create(model=MODEL, input="hi", stream=True, **fault("refusal")))
    for event in events:
        validate_response_event(event.to_dict())
    assert "".join(e.delta for e in events if e.type == "response.refusal.delta") == REFUSAL
    assert [e.refusal for e in events if e.type == "response.refusal.done"] == [REFUSAL]


def test_refusal_is_chat_message_refusal(client):
    completion = chat(client, "refusal")
    validate_chat_completion(completion.to_dict())
    message = completion.choices[0].message
    assert (message.content, message.refusal) == (None, REFUSAL)
    chunks = list(chat(client, "refusal", stream=True))
    for chunk in chunks:
        validate_chat_chunk(chunk.to_dict())
    assert "".join(c.choices[0].delta.refusal or "" for c in chunks if c.choices) == REFUSAL


def test_refusal_over_websocket(server):
    with server.client().responses.connect(extra_headers={FAULT: "refusal"}) as conn:
        conn.response.create(model=MODEL, input="hi")
        events = []
        for event in conn:
            events.append(event)
            if event.type == "response.completed":
                break
    assert events[-1].response.output[0].content[0].refusal == REFUSAL


# ---- empty_output ----------------------------------------------------------------------
def test_empty_output(client):
    response = client.responses.create(model=MODEL, input="hi", **fault("empty_output"))
    assert (response.status, response.output_text, response.usage.output_tokens) == ("completed", "", 0)
    completion = chat(client, "empty_output")
    assert (completion.choices[0].message.content, completion.choices[0].finish_reason) == ("", "stop")


# ---- tool calls ------------------------------------------------------------------------
def test_unknown_tool_call_calls_a_function_not_offered(client):
    response = client.responses.create(model=MODEL, input="hi", tools=TOOLS_RESP, **fault("unknown_tool_call"))
    [call] = response.output
    assert call.type == "function_call" and call.name != "get_weather"
    completion = chat(client, "unknown_tool_call", tools=TOOLS_CHAT)
    [chat_call] = completion.choices[0].message.tool_calls
    assert chat_call.function.name != "get_weather"
    assert completion.choices[0].finish_reason == "tool_calls"


def test_malformed_tool_arguments_are_not_json(client):
    response = client.responses.create(model=MODEL, input="hi", tools=TOOLS_RESP,
                                       **fault("malformed_tool_arguments"))
    [call] = response.output
    assert call.name == "get_weather"
    with pytest.raises(json.JSONDecodeError):
        json.loads(call.arguments)
    chunks = list(chat(client, "malformed_tool_arguments", tools=TOOLS_CHAT, stream=True))
    streamed = "".join(c.choices[0].delta.tool_calls[0].function.arguments or ""
                       for c in chunks if c.choices and c.choices[0].delta.tool_calls)
    with pytest.raises(json.JSONDecodeError):
        json.loads(streamed)


def test_schema_violating_tool_arguments_are_json_that_breaks_the_schema(client):
    for _ in range(3):
        completion = chat(client, "schema_violating_tool_arguments", tools=TOOLS_CHAT)
        [call] = completion.choices[0].message.tool_calls
        arguments = json.loads(call.function.arguments)
        assert call.function.name == "get_weather"
        assert not jsonschema.Draft202012Validator(SCHEMA).is_valid(arguments)


# ---- truncated_output ------------------------------------------------------------------
def test_truncated_output_cuts_the_text_and_is_incomplete(client):
    seed = {"x-llmsim-seed": "5"}
    whole = client.responses.create(model=MODEL, input="hi", extra_headers=seed)
    cut = client.responses.create(model=MODEL, input="hi", **fault("truncated_output", **seed))
    assert (cut.status, cut.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert 0 < len(cut.output_text) < len(whole.output_text)
    assert whole.output_text.startswith(cut.output_text)
    assert cut.usage.output_tokens < whole.usage.output_tokens


def test_truncated_output_in_chat_stream_is_finish_reason_length(client):
    chunks = list(chat(client, "truncated_output", stream=True, tools=TOOLS_CHAT, tool_choice="required"))
    for chunk in chunks:
        validate_chat_chunk(chunk.to_dict())
    streamed = "".join(c.choices[0].delta.tool_calls[0].function.arguments or ""
                       for c in chunks if c.choices and c.choices[0].delta.tool_calls)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    with pytest.raises(json.JSONDecodeError):       # cut mid-value
        json.loads(streamed)


# ---- other triggers --------------------------------------------------------------------
def test_content_fault_from_the_schedule(server, client):
    with httpx.Client(base_url=server.url) as admin:
        assert admin.post("/llmsim/faults", json={"schedule": [{"kind": "refusal", "count": 1}]}).status_code == 200
        try:
            first = client.responses.create(model=MODEL, input="hi")
            second = client.responses.create(model=MODEL, input="hi")
        finally:
            admin.delete("/llmsim/faults")
    assert first.output[0].content[0].type == "refusal"
    assert second.output[0].content[0].type == "output_text"


# ---- x-llmsim-seed ---------------------------------------------------------------------
def _seeded(client, seed: str, **kwargs):
    return client.responses.create(model=MODEL, input="hi", tools=TOOLS_RESP, tool_choice="required",
                                   extra_headers={"x-llmsim-seed": seed}, **kwargs)


def test_request_seed_fixes_ids_arguments_and_text(client):
    a, b, other = _seeded(client, "42"), _seeded(client, "42"), _seeded(client, "43")
    assert (a.id, a.output[0].call_id, a.output[0].arguments) == (b.id, b.output[0].call_id, b.output[0].arguments)
    assert a.id != other.id
    texts = [client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                            extra_headers={"x-llmsim-seed": "7"}).choices[0].message.content
             for _ in range(2)]
    assert texts[0] == texts[1]


async def test_request_seed_fixes_timing_whatever_the_server_seed(app_client):
    """With a latency profile, the same x-llmsim-seed gives the same simulated timing (the
    usage extension reports it) on servers started with different --seed values."""
    async def timing(server_seed: int):
        async with app_client(profile="fast", seed=server_seed, target_tokens=5) as http:
            await http.post("/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
            reply = await http.post("/v1/chat/completions", headers={"x-llmsim-seed": "11"},
                                    json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
        usage = reply.json()["usage"]
        return usage["time_to_first_token"], usage["throughput_after_first_token"]
    assert await timing(1) == await timing(2)


def test_bad_request_seed_is_a_400_envelope(server):
    with httpx.Client(base_url=server.base) as http:
        reply = http.post("/responses", json={"model": MODEL, "input": "x"}, headers={"x-llmsim-seed": "abc"})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "x-llmsim-seed"
