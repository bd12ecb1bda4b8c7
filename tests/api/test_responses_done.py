"""`--responses-done`: Responses SSE streams end with `data: [DONE]` (off by default, as
OpenAI's), on a live server: created streams, background streams and replays of stored ones
(GET /responses/{id}?stream=true); the openai SDK still reads them; the WebSocket mode, whose
messages are JSON events only, sends none."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from websockets.asyncio.client import connect

import sse
from oai_schemas import validate_response_event

DONE = b"data: [DONE]\n\n"


@pytest.fixture(scope="module")
def done_server(live_server_factory):
    return live_server_factory("--profile", "instant", "--responses-done")


def post_stream(server, **body) -> httpx.Response:
    return httpx.post(f"{server.base}/responses", json={"model": "o3", "input": "hi", "stream": True, **body},
                      timeout=30)


def check_ends_with_done(raw: bytes) -> list:
    """The events of a stream that ends with one [DONE] after a valid terminal event."""
    assert raw.endswith(DONE)
    assert raw.count(b"[DONE]") == 1
    events = sse.parse(raw.decode())
    *json_events, (_, last) = events
    assert last == "[DONE]"
    for _, event in json_events:
        validate_response_event(event)
    return [event for _, event in json_events]


def test_off_by_default_no_done(server):
    raw = post_stream(server).content
    assert b"[DONE]" not in raw
    assert sse.parse(raw.decode())[-1][1]["type"] == "response.completed"


def test_a_created_stream_ends_with_done_after_response_completed(done_server):
    events = check_ends_with_done(post_stream(done_server).content)
    assert events[-1]["type"] == "response.completed"


def test_an_incomplete_stream_ends_with_done_too(done_server):
    events = check_ends_with_done(post_stream(done_server, max_output_tokens=5).content)
    assert events[-1]["type"] == "response.incomplete"


def test_a_stored_streams_replay_ends_with_done(done_server):
    events = check_ends_with_done(post_stream(done_server).content)
    response_id = events[0]["response"]["id"]
    replay = httpx.get(f"{done_server.base}/responses/{response_id}", params={"stream": "true"}, timeout=30)
    assert check_ends_with_done(replay.content) == events


def test_a_background_stream_and_its_replay_end_with_done(done_server):
    events = check_ends_with_done(post_stream(done_server, background=True).content)
    assert events[-1]["type"] == "response.completed"
    response_id = events[0]["response"]["id"]
    replay = httpx.get(f"{done_server.base}/responses/{response_id}", params={"stream": "true"}, timeout=30)
    assert check_ends_with_done(replay.content) == events


def test_a_replay_after_a_sequence_number_ends_with_done(done_server):
    events = check_ends_with_done(post_stream(done_server).content)
    response_id = events[0]["response"]["id"]
    replay = httpx.get(f"{done_server.base}/responses/{response_id}",
                       params={"stream": "true", "starting_after": 2}, timeout=30)
    assert check_ends_with_done(replay.content) == events[3:]


def test_the_sdk_stream_helper_reads_a_stream_ending_with_done(done_server):
    client = done_server.client()
    with client.responses.stream(model="o3", input="hi") as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert types[-1] == "response.completed"
    assert final.status == "completed" and final.output_text


def test_the_sdk_iterates_a_created_stream_and_a_retrieved_one(done_server):
    client = done_server.client()
    created = list(client.responses.create(model="o3", input="hi", stream=True))
    assert created[-1].type == "response.completed"
    again = list(client.responses.retrieve(created[-1].response.id, stream=True))
    assert [event.type for event in again] == [event.type for event in created]


async def test_websocket_messages_stay_json_events_only(done_server):
    url = done_server.url.replace("http://", "ws://") + "/v1/responses"
    async with connect(url) as ws:
        received = []
        for _ in range(2):
            await ws.send(json.dumps({"type": "response.create", "model": "gpt-4o", "input": "hi"}))
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 10))
                received.append(event["type"])
                if event["type"] == "response.completed":
                    break
        with pytest.raises(asyncio.TimeoutError):     # nothing after the second answer
            await asyncio.wait_for(ws.recv(), 0.5)
    assert received.count("response.created") == 2 and received[0] == "response.created"


def test_config_file_key_and_environment_turn_it_on(tmp_path):
    from settingsload import load, write_config
    assert load(["--config", write_config(tmp_path, {"responses_done": True})]).responses_done is True
    assert load(environ={"LLMSIM_RESPONSES_DONE": "true"}).responses_done is True
    assert load().responses_done is False
