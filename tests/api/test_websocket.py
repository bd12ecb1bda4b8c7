"""Responses API WebSocket mode against live servers, with a plain `websockets` client.

Every event received is validated against OpenAI's schemas (`oai_schemas`).
"""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from oai_schemas import validate_error_body, validate_response_event, validate_ws_error

MODEL = "gpt-4o"
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}


def ws_url(server, base: str = "/v1") -> str:
    return server.url.replace("http://", "ws://") + base + "/responses"


def create(**fields) -> str:
    return json.dumps({"type": "response.create", "model": MODEL, **fields})


async def receive(ws) -> dict:
    event = json.loads(await asyncio.wait_for(ws.recv(), 10))
    if event["type"] == "error":
        validate_ws_error(event)
    else:
        validate_response_event(event)
    return event


async def answer(ws) -> list[dict]:
    """Events up to and including the next terminal event (or error)."""
    events = []
    while not events or events[-1]["type"] not in TERMINAL:
        events.append(await receive(ws))
    return events


@pytest.fixture(scope="module")
def slow_server(live_server_factory):
    """Visible timing: 300 ms to the first token, then 30 ms per token, 10 tokens."""
    return live_server_factory("--ttft-ms", "300", "--tbt-ms", "30", "--target-tokens", "10")


@pytest.fixture(scope="module")
def limited_server(live_server_factory):
    """Tiny WebSocket limits: 2 s connection age, 2 connections at once."""
    return live_server_factory("--ttft-ms", "300", "--tbt-ms", "2", "--ws-max-age-s", "2",
                               "--ws-max-connections", "2")


@pytest.mark.parametrize("base", ["/v1", "/openai/v1"])
async def test_flat_frame_streams_the_sse_event_sequence(server, base):
    async with connect(ws_url(server, base)) as ws:
        await ws.send(create(input="Hello there", instructions="Be brief."))
        events = await answer(ws)
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert final["instructions"] == "Be brief."
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert final["output_text"] == text


async def test_nested_frame_is_answered_like_a_flat_one(server):
    async with connect(ws_url(server)) as ws:
        await ws.send(json.dumps({"type": "response.create",
                                  "response": {"model": MODEL, "input": "Hi", "metadata": {"k": "v"}}}))
        events = await answer(ws)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["metadata"] == {"k": "v"}


async def test_frames_sent_together_are_answered_in_order_never_interleaved(slow_server):
    async with connect(ws_url(slow_server)) as ws:
        await ws.send(create(input="first", metadata={"turn": "1"}))
        await ws.send("{not json")
        await ws.send(create(input="second", metadata={"turn": "2"}))
        first, error, second = await answer(ws), await answer(ws), await answer(ws)
    assert {e["response"]["metadata"]["turn"] for e in first if "response" in e} == {"1"}
    assert error == [error[0]] and error[0]["error"]["code"] == "invalid_json"
    assert second[0]["type"] == "response.created"
    assert second[0]["sequence_number"] == 0
    assert second[-1]["response"]["metadata"] == {"turn": "2"}
    first_ids = {e.get("item_id") for e in first} - {None}
    assert first_ids.isdisjoint({e.get("item_id") for e in second})


async def test_events_follow_the_simulated_timing(slow_server):
    async with connect(ws_url(slow_server)) as ws:
        sent = time.monotonic()
        await ws.send(create(input="time me"))
        arrivals = []
        while True:
            event = await receive(ws)
            arrivals.append((time.monotonic() - sent, event["type"]))
            if event["type"] in TERMINAL:
                break
    deltas = [t for t, kind in arrivals if kind == "response.output_text.delta"]
    assert len(deltas) == 10
    assert deltas[0] >= 0.29                           # time to first token
    assert deltas[-1] >= 0.29 + 0.95 * 0.03 * 9        # then 30 ms per token, never early
    assert arrivals[0][1] == "response.created" and arrivals[0][0] < deltas[0]


async def connect_when_free(url: str, within: float = 5.0):
    """Connect, retrying while the server still counts connections the client already closed
    (a server notices a close a moment after the client does)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await connect(url)
        except InvalidStatus as exc:
            if exc.response.status_code != 503 or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


def conversation_input(*turns: tuple[str, str]) -> list[dict]:
    return [{"role": role, "content": text if role == "user" else
             [{"type": "output_text", "text": text}]} for role, text in turns]


async def test_previous_response_id_continues_the_conversation(server):
    async with connect(ws_url(server)) as ws:
        await ws.send(create(input="Tell me a story."))
        first = (await answer(ws))[-1]["response"]
        await ws.send(create(input="And then?", previous_response_id=first["id"]))
        second = (await answer(ws))[-1]
    assert second["type"] == "response.completed"
    assert second["response"]["previous_response_id"] == first["id"]
    explicit = conversation_input(("user", "Tell me a story."), ("assistant", first["output_text"]),
                                  ("user", "And then?"))
    async with httpx.AsyncClient(base_url=server.base) as http:
        body = (await http.post("/responses", json={"model": MODEL, "input": explicit})).json()
    assert second["response"]["usage"]["input_tokens"] == body["usage"]["input_tokens"]


async def test_unknown_previous_response_id_is_an_error_event(server):
    async with connect(ws_url(server)) as ws:
        await ws.send(create(input="Hi"))
        await answer(ws)
        await ws.send(create(input="Hi", previous_response_id="resp_unknown"))
        [error] = await answer(ws)
        await ws.send(create(input="still there?"))
        after = await answer(ws)
    assert error["status"] == 400
    assert error["error"]["code"] == "previous_response_not_found"
    assert error["error"]["param"] == "previous_response_id"
    assert "resp_unknown" in error["error"]["message"]
    assert after[-1]["type"] == "response.completed"


async def test_only_the_latest_response_can_be_continued(server):
    async with connect(ws_url(server)) as ws:
        await ws.send(create(input="one"))
        older = (await answer(ws))[-1]["response"]["id"]
        await ws.send(create(input="two"))
        await answer(ws)
        await ws.send(create(input="three", previous_response_id=older))
        [error] = await answer(ws)
    assert error["error"]["code"] == "previous_response_not_found"


async def test_generate_false_warms_up_without_output_and_can_be_continued(server):
    async with connect(ws_url(server)) as ws:
        await ws.send(create(input="Context to keep.", generate=False))
        warm = await answer(ws)
        await ws.send(create(input="Now answer.", previous_response_id=warm[-1]["response"]["id"]))
        after = (await answer(ws))[-1]["response"]
    assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
    assert warm[-1]["response"]["output"] == []
    assert warm[-1]["response"]["usage"]["output_tokens"] == 0
    assert warm[-1]["response"]["usage"]["input_tokens"] > 0
    explicit = conversation_input(("user", "Context to keep."), ("user", "Now answer."))
    async with httpx.AsyncClient(base_url=server.base) as http:
        body = (await http.post("/responses", json={"model": MODEL, "input": explicit})).json()
    assert after["usage"]["input_tokens"] == body["usage"]["input_tokens"]


SCHEMA_ERRORS = [
    ({"input": "no model"}, "model", "missing_required_parameter"),
    ({"model": MODEL, "temperature": 5}, "temperature", "invalid_value"),
    ({"model": MODEL, "bogus": 1}, "bogus", "invalid_value"),
    ({"model": MODEL, "input": [{"role": "user", "content": [{"type": "nope"}]}]},
     "input[0].content[0].type", "invalid_value"),
]


@pytest.mark.parametrize("body,param,code", SCHEMA_ERRORS)
async def test_invalid_fields_get_the_same_error_as_http(server, body, param, code):
    async with httpx.AsyncClient(base_url=server.base) as http:
        http_error = (await http.post("/responses", json=body)).json()["error"]
    async with connect(ws_url(server)) as ws:
        await ws.send(json.dumps({"type": "response.create", **body}))
        [event] = await answer(ws)
    assert event["status"] == 400
    assert event["error"] == http_error
    assert (event["error"]["param"], event["error"]["code"]) == (param, code)


MALFORMED = [
    ("not json at all", None, "invalid_json"),
    ("[1, 2]", None, "invalid_type"),
    ('{"model": "gpt-4o"}', "type", "missing_required_parameter"),
    ('{"type": "response.cancel"}', "type", "invalid_value"),
    ('{"type": "response.create", "response": "hi"}', "response", "invalid_type"),
    ('{"type": "response.create", "model": "gpt-4o", "generate": "no"}', "generate", "invalid_type"),
    ('{"type": "response.create", "model": "gpt-4o", "stream_id": "lane_1"}', "stream_id",
     "unsupported_parameter"),
    ('{"type": "response.create", "model": "gpt-4o", "background": true}', "background",
     "unsupported_parameter"),
]


@pytest.mark.parametrize("frame,param,code", MALFORMED)
async def test_malformed_frame_gets_an_error_event_and_the_connection_stays_usable(server, frame, param, code):
    async with connect(ws_url(server)) as ws:
        await ws.send(frame)
        [error] = await answer(ws)
        await ws.send(create(input="works?"))
        after = await answer(ws)
    assert error["status"] == 400
    assert "sequence_number" not in error                 # no response stream emitted it
    assert error["error"]["type"] == "invalid_request_error"
    assert (error["error"]["param"], error["error"]["code"]) == (param, code)
    assert error["error"]["message"]
    assert after[-1]["type"] == "response.completed"


async def test_unknown_model_error_event_matches_http(server):
    async with httpx.AsyncClient(base_url=server.base) as http:
        http_error = (await http.post("/responses", json={"model": "no-such-model"})).json()["error"]
    async with connect(ws_url(server)) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "no-such-model"}))
        [event] = await answer(ws)
    assert event["status"] == 404
    assert event["error"] == http_error


async def test_stream_key_is_tolerated(server):
    async with connect(ws_url(server)) as ws:
        await ws.send(create(input="hi", stream=True, background=False))
        events = await answer(ws)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["background"] is False


async def test_connection_closes_after_max_age_with_an_error_event(limited_server):
    async with connect(ws_url(limited_server)) as ws:
        opened = time.monotonic()
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
    validate_ws_error(error)
    assert time.monotonic() - opened >= 1.9
    assert error["error"]["code"] == "websocket_connection_limit_reached"
    assert error["error"]["type"] == "invalid_request_error"
    assert ws.close_code == 1000


async def test_upgrades_beyond_the_connection_cap_are_refused_with_a_json_error(limited_server):
    async with connect(ws_url(limited_server)), connect(ws_url(limited_server)):
        with pytest.raises(InvalidStatus) as refused:
            await connect(ws_url(limited_server))
    response = refused.value.response
    assert response.status_code == 503
    body = json.loads(response.body)
    validate_error_body(body)
    assert body["error"]["code"] == "websocket_connection_cap_reached"
    async with await connect_when_free(ws_url(limited_server)) as ws:     # slots come back on close
        await ws.send(create(input="hi"))
        assert (await answer(ws))[-1]["type"] == "response.completed"


async def test_disconnect_mid_response_frees_the_connection_and_server_stays_healthy(limited_server):
    for _ in range(2):                                    # fill the cap, then vanish mid-response
        ws = await connect(ws_url(limited_server))
        await ws.send(create(input="long answer"))
        assert (await receive(ws))["type"] == "response.created"
        ws.transport.abort()                              # no close frame
    async with httpx.AsyncClient(base_url=limited_server.url) as http:
        assert (await http.get("/health")).status_code == 200
    url = ws_url(limited_server)
    async with await connect_when_free(url) as a, await connect_when_free(url) as b:
        for ws in (a, b):
            await ws.send(create(input="again"))
        assert [(await answer(ws))[-1]["type"] for ws in (a, b)] == ["response.completed"] * 2


async def test_unknown_websocket_path_is_refused_with_404(server):
    with pytest.raises(InvalidStatus) as refused:
        await connect(server.url.replace("http://", "ws://") + "/v1/nope")
    assert refused.value.response.status_code == 404
    validate_error_body(json.loads(refused.value.response.body))


SAME_TURNS = [
    {"model": MODEL, "input": "Hello there", "instructions": "Be brief.", "metadata": {"k": "v"}},
    {"model": "o4-mini", "input": "Think, then answer.", "reasoning": {"effort": "low", "summary": "auto"}},
    {"model": MODEL, "input": "Weather in Paris?", "tool_choice": "required",
     "tools": [{"type": "function", "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]},
    {"model": MODEL, "input": "Go on at length.", "max_output_tokens": 16},
]
FAULT, CUT = "x-llmsim-fault", "stream_failed;after_tokens=3"


def sse_payloads(stream: bytes) -> list[bytes]:
    """The data of each event of an SSE body, exactly as sent (no `event:`/`data:` envelope)."""
    payloads = []
    for block in stream.split(b"\n\n")[:-1]:
        if block.startswith(b":"):
            continue                                        # a keep-alive comment
        if block.startswith(b"event: "):
            block = block.split(b"\n", 1)[1]
        assert block.startswith(b"data: ") and b"\n" not in block
        payloads.append(block[len(b"data: "):])
    return payloads


async def ws_payloads(ws, body: dict) -> list[bytes]:
    await ws.send(json.dumps({"type": "response.create", **body}))
    frames = []
    while not frames or json.loads(frames[-1])["type"] not in TERMINAL:
        frames.append((await asyncio.wait_for(ws.recv(), 10)).encode())
    return frames


async def test_websocket_frames_are_the_sse_events_data_byte_for_byte(live_server_factory):
    """Two servers with the same seed: one answers each request as SSE, the other over a
    WebSocket; every frame is the matching SSE event's data, ids and timestamps included."""
    over_http, over_ws = (live_server_factory("--profile", "instant", "--seed", "4242") for _ in range(2))
    async with httpx.AsyncClient(base_url=over_http.base, timeout=10) as http:
        sse = [sse_payloads((await http.post("/responses", json={**body, "stream": True})).content)
               for body in SAME_TURNS]
        cut = await http.post("/responses", json={**SAME_TURNS[0], "stream": True}, headers={FAULT: CUT})
        sse.append(sse_payloads(cut.content))
    async with connect(ws_url(over_ws)) as ws:
        frames = [await ws_payloads(ws, body) for body in SAME_TURNS]
    async with connect(ws_url(over_ws), additional_headers={FAULT: CUT}) as ws:
        frames.append(await ws_payloads(ws, SAME_TURNS[0]))
    for turn in frames:
        for frame in turn:
            validate_response_event(json.loads(frame))
    assert [json.loads(turn[-1])["type"] for turn in frames] == [
        "response.completed", "response.completed", "response.completed", "response.incomplete",
        "response.failed"]
    assert any(b'"response.function_call_arguments.delta"' in frame for frame in frames[2])
    assert any(b'"response.reasoning_summary_text.delta"' in frame for frame in frames[1])
    assert frames == sse
