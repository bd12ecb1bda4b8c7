"""Responses WebSocket mode through the official SDK's client (`client.responses.connect()`)."""
from __future__ import annotations

from openai.types.responses.responses_server_event import ResponseWsError

from oai_schemas import validate_response_event, validate_ws_error

MODEL = "gpt-4o"
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}


ON_BOTH_SERVERS = True     # each test runs on `--server tuned` and `--server plain` (conftest)


def checked(event) -> dict:
    data = event.to_dict()
    (validate_ws_error if data["type"] == "error" else validate_response_event)(data)
    return data


def turn(conn) -> list:
    events = []
    for event in conn:
        events.append(event)
        checked(event)
        if event.type in TERMINAL:
            return events
    raise AssertionError("connection closed before the response finished")


def test_sdk_runs_a_multi_turn_conversation(client):
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="Say hello.")
        first = turn(conn)
        conn.response.create(model=MODEL, input="Again, louder.", previous_response_id=first[-1].response.id)
        second = turn(conn)
    assert first[0].type == "response.created"
    assert first[-1].type == second[-1].type == "response.completed"
    text = "".join(e.delta for e in second if e.type == "response.output_text.delta")
    assert second[-1].response.output_text == text
    assert second[-1].response.previous_response_id == first[-1].response.id
    assert second[-1].response.usage.input_tokens > first[-1].response.usage.input_tokens


def test_sdk_parses_error_events_and_the_connection_stays_usable(client):
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="Hi", previous_response_id="resp_missing")
        [error] = turn(conn)
        conn.response.create(model=MODEL, input="Hi", stream=True)
        after = turn(conn)
    assert isinstance(error, ResponseWsError)
    assert (error.status, error.error.code) == (400, "previous_response_not_found")
    assert after[-1].type == "response.completed"


def test_sdk_warm_up_with_generate_false(client):
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="Keep this in mind.", generate=False)
        warm = turn(conn)
        conn.response.create(model=MODEL, input="Go.", previous_response_id=warm[-1].response.id)
        after = turn(conn)
    assert warm[-1].response.output == []
    assert after[-1].type == "response.completed"


async def test_async_sdk_client_streams_reasoning_events(server):
    client = server.async_client()
    async with client.responses.connect() as conn:
        await conn.response.create(model="o4-mini", input="Think, then answer.",
                                   reasoning={"effort": "low", "summary": "auto"})
        events = []
        async for event in conn:
            events.append(checked(event))
            if event.type in TERMINAL:
                break
    types = [e["type"] for e in events]
    assert types[-1] == "response.completed"
    assert "response.reasoning_summary_text.delta" in types
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
