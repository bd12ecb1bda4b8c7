"""Injected faults on the Responses WebSocket mode (live server, plain `websockets` client)."""
from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from oai_schemas import validate_response_event, validate_ws_error

FAULT = "x-llmsim-fault"
CREATE = json.dumps({"type": "response.create", "model": "gpt-4o-mini", "input": "Say something."})
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/v1/responses"


async def turn(ws) -> list[dict]:
    """The events of one response.create, up to its terminal event, each schema-checked."""
    await ws.send(CREATE)
    events = []
    while not events or events[-1]["type"] not in TERMINAL:
        event = json.loads(await asyncio.wait_for(ws.recv(), 10))
        (validate_ws_error if event["type"] == "error" else validate_response_event)(event)
        events.append(event)
    return events


async def test_immediate_fault_is_an_error_event_and_the_socket_stays_open(server):
    async with connect(ws_url(server), additional_headers={FAULT: "rate_limit"}) as ws:
        for _ in range(2):                       # the header applies to every turn
            (event,) = await turn(ws)
            assert event["status"] == 429
            assert event["error"]["code"] == "rate_limit_exceeded"


async def test_timeout_fault_is_a_504_error_event(server):
    async with connect(ws_url(server), additional_headers={FAULT: "timeout;timeout_after_ms=200"}) as ws:
        (event,) = await turn(ws)
    assert (event["status"], event["error"]["type"]) == (504, "timeout_error")


async def test_stream_failed_ends_the_turn_with_response_failed(server):
    async with connect(ws_url(server), additional_headers={FAULT: "stream_failed;after_tokens=2"}) as ws:
        events = await turn(ws)
    assert [e["type"] for e in events].count("response.output_text.delta") == 2
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_error"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


async def test_stream_error_ends_the_turn_with_a_sequenced_error_event(server):
    async with connect(ws_url(server), additional_headers={FAULT: "stream_error;after_tokens=1"}) as ws:
        events = await turn(ws)
    last = events[-1]
    assert last["type"] == "error" and last["status"] == 500
    assert last["sequence_number"] == len(events) - 1


async def test_stream_drop_closes_the_socket_mid_response(server):
    async with connect(ws_url(server), additional_headers={FAULT: "stream_drop;after_tokens=2"}) as ws:
        await ws.send(CREATE)
        seen = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                seen.append(json.loads(await asyncio.wait_for(ws.recv(), 10))["type"])
    assert seen.count("response.output_text.delta") == 2
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011


async def test_websocket_upgrade_needs_the_api_key(live_server_factory):
    server = live_server_factory("--profile", "instant", "--api-key", "sk-ws")
    with pytest.raises(InvalidStatus) as refused:
        async with connect(ws_url(server)):
            pass
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
    async with connect(ws_url(server), additional_headers={"authorization": "Bearer sk-ws"}) as ws:
        assert (await turn(ws))[-1]["type"] == "response.completed"
