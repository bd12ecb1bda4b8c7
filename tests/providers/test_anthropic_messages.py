"""Anthropic Messages through the official `anthropic` SDK against one live server: text,
streams, tools, thinking, stopping, usage, count_tokens and models. Every body and event is
checked against Anthropic's reference (tests/anthropic_schemas.py)."""
from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import jsonschema
import pytest

import sse
from anthropic_schemas import check_body, check_event
from conftest import LiveServer

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

MODEL = "claude-sonnet-4-6"
HELLO = [{"role": "user", "content": "Say something."}]
WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"},
                                                             "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                            "required": ["city", "days"], "additionalProperties": False}}
THINKING = {"type": "enabled", "budget_tokens": 1024}


@pytest.fixture(scope="module")
def server(live_server_factory) -> LiveServer:
    return live_server_factory("--profile", "instant", "--target-tokens", "30")


@pytest.fixture(scope="module")
def client(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)


def raw_message(client, **kwargs) -> dict:
    """The body as sent, checked against the reference."""
    body = client.messages.with_raw_response.create(**kwargs).http_response.json()
    check_body("message", body)
    return body


def sse_events(server, body: dict, path: str = "/v1/messages") -> list[tuple[str, dict]]:
    """A stream's (event name, data) pairs, each checked against the reference."""
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=30,
                      headers={"anthropic-version": "2023-06-01", "x-api-key": "k"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse.parse(response.read().decode())    # strict: frames end with a blank line
    for name, data in events:
        check_event(name, data)
    return events


def test_create_answers_with_a_text_block(client):
    body = raw_message(client, model=MODEL, max_tokens=200, messages=HELLO)
    message = client.messages.create(model=MODEL, max_tokens=200, messages=HELLO)
    assert body["content"][0]["type"] == "text" and body["content"][0]["text"]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.output_tokens == 30
    assert message.model == MODEL


def test_the_anthropic_prefix_serves_the_same_api(server):
    response = httpx.post(server.url + "/anthropic/v1/messages", timeout=30,
                          json={"model": MODEL, "max_tokens": 50, "messages": HELLO})
    assert response.status_code == 200
    check_body("message", response.json())


def test_usage_input_tokens_equal_count_tokens(client):
    messages = [{"role": "user", "content": "What is the weather in Paris today?"},
                {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}]},
                {"role": "user", "content": [{"type": "text", "text": "Please hurry."}]}]
    message = client.messages.create(model=MODEL, max_tokens=100, system="Be brief.",
                                     messages=messages, tools=[WEATHER], tool_choice={"type": "none"})
    counted = client.messages.count_tokens(model=MODEL, system="Be brief.", messages=messages, tools=[WEATHER])
    assert message.usage.input_tokens == counted.input_tokens > 20


LONG_SYSTEM = [{"type": "text", "text": "You are a careful assistant. " * 300, "cache_control": {"type": "ephemeral"}}]


def test_a_cached_prefix_is_written_then_read(server, client):
    question = [{"role": "user", "content": "Which cache is this? " + server.url}]    # unique per server
    total = client.messages.count_tokens(model=MODEL, system=LONG_SYSTEM, messages=question).input_tokens
    first = raw_message(client, model=MODEL, max_tokens=50, system=LONG_SYSTEM, messages=question)["usage"]
    second = raw_message(client, model=MODEL, max_tokens=50, system=LONG_SYSTEM, messages=question)["usage"]
    assert first["cache_creation_input_tokens"] > 1024 and first["cache_read_input_tokens"] == 0
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] == 0
    assert first["input_tokens"] == second["input_tokens"] > 0
    assert first["input_tokens"] + first["cache_creation_input_tokens"] == total


def test_a_short_prefix_is_not_cached(client):
    short = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    for _ in range(2):
        usage = client.messages.create(model=MODEL, max_tokens=50, system=short, messages=HELLO).usage
        assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (0, 0)


def test_streamed_usage_reports_the_cache(server):
    question = [{"role": "user", "content": "Streamed cache check."}]
    body = {"model": MODEL, "max_tokens": 50, "system": LONG_SYSTEM, "messages": question}
    sse_events(server, body)
    events = sse_events(server, body)
    started, final = events[0][1]["message"]["usage"], events[-2][1]["usage"]
    assert started["cache_read_input_tokens"] == final["cache_read_input_tokens"] > 1024
    assert started["cache_creation_input_tokens"] == final["cache_creation_input_tokens"] == 0


def test_count_tokens_grows_with_the_input(server, client):
    short = client.messages.count_tokens(model=MODEL, messages=HELLO).input_tokens
    longer = client.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "Say something. " * 20}]).input_tokens
    assert longer > short > 0
    raw = httpx.post(server.url + "/v1/messages/count_tokens", json={"model": MODEL, "messages": HELLO})
    check_body("count_tokens", raw.json())


def test_max_tokens_stops_the_answer(client):
    body = raw_message(client, model=MODEL, max_tokens=5, messages=HELLO)
    assert body["stop_reason"] == "max_tokens"
    assert body["usage"]["output_tokens"] == 5


def test_a_stop_sequence_ends_the_text_before_it(client):
    plain = client.messages.create(model=MODEL, max_tokens=100, messages=HELLO).content[0].text
    stop = plain.split()[3]
    message = client.messages.create(model=MODEL, max_tokens=100, messages=HELLO, stop_sequences=["zzz", stop])
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop
    assert message.content[0].text == plain[:plain.index(stop)]
    assert message.usage.output_tokens < 30


def test_stream_events_come_in_anthropic_order(server):
    events = sse_events(server, {"model": MODEL, "max_tokens": 100, "messages": HELLO})
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-4:] == ["content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    deltas = [data["delta"]["text"] for name, data in events if name == "content_block_delta"]
    assert len(deltas) == 30
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "end_turn"
    assert final["usage"]["output_tokens"] == 30
    assert final["usage"]["input_tokens"] == events[0][1]["message"]["usage"]["input_tokens"]


def test_sdk_stream_and_final_message(client):
    with client.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 30


def test_tool_use_input_follows_the_input_schema(client):
    body = raw_message(client, model=MODEL, max_tokens=200, messages=HELLO, tools=[WEATHER],
                       tool_choice={"type": "any"})
    assert body["stop_reason"] == "tool_use"
    uses = [block for block in body["content"] if block["type"] == "tool_use"]
    assert uses and all(use["name"] == "get_weather" for use in uses)
    for use in uses:
        jsonschema.validate(use["input"], WEATHER["input_schema"])


def test_tool_result_round_trip_ends_with_text(client):
    first = client.messages.create(model=MODEL, max_tokens=200, messages=HELLO, tools=[WEATHER],
                                   tool_choice={"type": "tool", "name": "get_weather"})
    use = next(block for block in first.content if block.type == "tool_use")
    messages = [*HELLO, {"role": "assistant", "content": [block.model_dump() for block in first.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                              "content": "Sunny, 21 degrees."}]}]
    second = client.messages.create(model=MODEL, max_tokens=200, messages=messages, tools=[WEATHER])
    assert second.stop_reason == "end_turn"
    assert [block.type for block in second.content] == ["text"]


def test_streamed_tool_use_assembles_its_input(server, client):
    events = sse_events(server, {"model": MODEL, "max_tokens": 200, "messages": HELLO, "tools": [WEATHER],
                                 "tool_choice": {"type": "any", "disable_parallel_tool_use": True}})
    partial = "".join(data["delta"]["partial_json"] for name, data in events
                      if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta")
    jsonschema.validate(json.loads(partial), WEATHER["input_schema"])
    with client.messages.stream(model=MODEL, max_tokens=200, messages=HELLO, tools=[WEATHER],
                                tool_choice={"type": "any"}) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    jsonschema.validate(final.content[0].input, WEATHER["input_schema"])


def test_thinking_comes_first_with_a_signature_inside_output_tokens(client):
    body = raw_message(client, model=MODEL, max_tokens=2000, messages=HELLO, thinking=THINKING)
    thinking, text = body["content"]
    assert thinking["type"] == "thinking" and thinking["thinking"] and thinking["signature"]
    assert text["type"] == "text"
    counted = client.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": thinking["thinking"]}]).input_tokens
    plain = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": ""}]).input_tokens
    assert body["usage"]["output_tokens"] == 30 + (counted - plain)


def test_thinking_stays_within_its_budget_and_max_tokens(client):
    message = client.messages.create(model=MODEL, max_tokens=1100, messages=HELLO,
                                     thinking={"type": "enabled", "budget_tokens": 1090})
    assert message.usage.output_tokens <= 1100
    big = client.messages.create(model=MODEL, max_tokens=4000, messages=[{"role": "user", "content": "x"}],
                                 thinking=THINKING)
    assert big.usage.output_tokens - 30 <= 1024


def test_streamed_thinking_sends_thinking_and_signature_deltas(server, client):
    events = sse_events(server, {"model": MODEL, "max_tokens": 2000, "messages": HELLO, "thinking": THINKING})
    kinds = [data["delta"]["type"] for name, data in events if name == "content_block_delta"]
    assert kinds[0] == "thinking_delta"
    signature = kinds.index("signature_delta")
    assert set(kinds[:signature]) == {"thinking_delta"} and set(kinds[signature + 1:]) == {"text_delta"}
    with client.messages.stream(model=MODEL, max_tokens=2000, messages=HELLO, thinking=THINKING) as stream:
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert final.content[0].signature


def test_earlier_thinking_blocks_are_accepted_and_not_counted(client):
    earlier = [{"type": "thinking", "thinking": "Lots of careful thought " * 20, "signature": "c2ln"},
               {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
               {"type": "text", "text": "Hello."}]
    without = [{"type": "text", "text": "Hello."}]
    ask = {"role": "user", "content": "And now?"}
    with_thinking = client.messages.create(model=MODEL, max_tokens=2000, thinking=THINKING,
                                           messages=[*HELLO, {"role": "assistant", "content": earlier}, ask])
    plain = client.messages.count_tokens(model=MODEL, thinking=THINKING,
                                         messages=[*HELLO, {"role": "assistant", "content": without}, ask])
    assert with_thinking.usage.input_tokens == plain.input_tokens


def test_models_list_in_anthropic_shape(server, client):
    page = client.models.list(limit=3)
    assert len(page.data) == 3 and page.has_more
    assert any(model.id == MODEL for model in client.models.list(limit=1000).data)
    assert client.models.retrieve(MODEL).id == MODEL
    raw = httpx.get(server.url + "/v1/models", headers={"anthropic-version": "2023-06-01"})
    check_body("model_list", raw.json())
    openai_shape = httpx.get(server.url + "/v1/models").json()
    assert openai_shape["object"] == "list"


@pytest.fixture(scope="module")
def seeded_apps():
    """Two in-process apps with the same --seed, each on a simulated clock of its own."""
    from llmsim.app import create_app
    from llmsim.clock import FakeClock
    from llmsim.settings import Settings

    return [(create_app(Settings(seed=7, generator="random"), clock=clock), clock)
            for clock in (FakeClock(), FakeClock())]


async def post_in_process(app, body: dict) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as http:
        return await http.post("/v1/messages", json=body)


def test_seed_makes_answers_reproducible(seeded_apps):
    body = {"model": MODEL, "max_tokens": 2000, "messages": HELLO, "thinking": THINKING, "tools": [WEATHER]}
    first, second = [asyncio.run(post_in_process(app, body)).content for app, _ in seeded_apps]
    assert first == second
    check_body("message", json.loads(first))


def test_claude_models_answer_at_their_own_latency_profiles(seeded_apps):
    """On a simulated clock, the time each answer takes follows its model's profile
    (profiles.yaml: claude-haiku starts in about 200 ms, claude-opus in about 1 s)."""
    app, clock = seeded_apps[0]

    def durations(model: str) -> list[float]:
        out = []
        for _ in range(5):
            began = clock.now()
            response = asyncio.run(post_in_process(app, {"model": model, "max_tokens": 10, "messages": HELLO}))
            assert response.status_code == 200
            out.append(clock.now() - began)
        return out
    haiku, opus = durations("claude-haiku-4-5"), durations("claude-opus-4-6")
    assert max(haiku) < 0.7 < min(opus)
