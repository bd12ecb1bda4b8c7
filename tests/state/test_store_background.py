"""Background responses through the official SDK against a live server with real latency:
queued at once, polled through in_progress to completed, cancelled, streamed and resumed."""
from __future__ import annotations

import time

import openai
import pytest

from oai_schemas import validate, validate_response_event

MODEL = "gpt-4o"
TTFT_S, TBT_S, TOKENS = 0.3, 0.02, 40      # a response takes ~1.1 s


@pytest.fixture(scope="module")
def slow(live_server_factory):
    server = live_server_factory("--ttft-ms", str(TTFT_S * 1000), "--tbt-ms", str(TBT_S * 1000),
                                 "--target-tokens", str(TOKENS))
    server.client().responses.create(model=MODEL, input="warm up")   # first-request costs out of the way
    return server


@pytest.fixture(scope="module")
def client(slow):
    return slow.client()


def poll(client, response_id: str, until: float) -> list[str]:
    """Statuses seen while polling until the response is no longer active or `until` passes."""
    seen = []
    while time.monotonic() < until:
        status = client.responses.retrieve(response_id).status
        if not seen or seen[-1] != status:
            seen.append(status)
        if status not in ("queued", "in_progress"):
            break
        time.sleep(0.02)
    return seen


def test_background_returns_queued_at_once_then_completes(client):
    started = time.monotonic()
    raw = client.responses.with_raw_response.create(model=MODEL, input="Take your time.", background=True)
    elapsed = time.monotonic() - started
    queued = raw.parse()
    assert (queued.status, queued.background, queued.output) == ("queued", True, [])
    assert elapsed < TTFT_S + TOKENS * TBT_S      # well before the answer is done
    seen = poll(client, queued.id, started + 10)
    validate("Response", raw.http_response.json())
    assert seen[-1] == "completed" and "in_progress" in seen
    done = client.responses.retrieve(queued.id)
    assert done.output_text and done.usage.output_tokens == TOKENS
    assert done.completed_at is not None


def test_cancel_during_the_run(client):
    queued = client.responses.create(model=MODEL, input="Never mind.", background=True)
    time.sleep(TTFT_S / 2)
    cancelled = client.responses.cancel(queued.id)
    assert (cancelled.id, cancelled.status, cancelled.output) == (queued.id, "cancelled", [])
    time.sleep(TTFT_S + TOKENS * TBT_S)       # past the time it would have finished
    later = client.responses.retrieve(queued.id)
    assert (later.status, later.output, later.usage) == ("cancelled", [], None)


def test_cancelling_twice_returns_the_cancelled_response(client):
    queued = client.responses.create(model=MODEL, input="Stop.", background=True)
    first = client.responses.cancel(queued.id)
    again = client.responses.cancel(queued.id)
    assert first.status == again.status == "cancelled"


def test_cancelling_a_finished_background_response_is_400(client):
    queued = client.responses.create(model=MODEL, input="Quick.", background=True)
    assert poll(client, queued.id, time.monotonic() + 10)[-1] == "completed"
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.cancel(queued.id)
    assert exc.value.response.json()["error"]["message"] == "Cannot cancel a completed response."
    assert client.responses.retrieve(queued.id).status == "completed"


def test_cancelling_a_synchronous_response_is_400(client):
    done = client.responses.create(model=MODEL, input="Now.")
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.cancel(done.id)
    assert exc.value.response.json()["error"]["message"] == "Cannot cancel a synchronous response."


def test_background_needs_store(client):
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model=MODEL, input="x", background=True, store=False)
    assert exc.value.response.json()["error"]["param"] == "background"


def test_background_stream_runs_to_completion(client):
    with client.responses.create(model=MODEL, input="Stream in the background.", background=True,
                                 stream=True) as stream:
        events = [event.to_dict() for event in stream]
    for event in events:
        validate_response_event(event)
    types = [e["type"] for e in events]
    assert types[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert events[0]["response"]["status"] == "queued" and types[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_a_dropped_background_stream_resumes_with_starting_after(client):
    with client.responses.create(model=MODEL, input="Resume me.", background=True, stream=True) as stream:
        head = []
        for event in stream:
            head.append(event.to_dict())
            if event.type == "response.output_text.delta":
                break                       # the connection drops mid-answer
    response_id, last = head[0]["response"]["id"], head[-1]["sequence_number"]
    rest = [e.to_dict() for e in client.responses.retrieve(response_id, stream=True, starting_after=last)]
    whole = head + rest
    assert [e["sequence_number"] for e in whole] == list(range(len(whole)))
    assert rest[-1]["type"] == "response.completed"
    text = "".join(e["delta"] for e in whole if e["type"] == "response.output_text.delta")
    assert text == rest[-1]["response"]["output_text"]


def test_cancel_ends_a_background_stream(client):
    with client.responses.create(model=MODEL, input="Cut me off.", background=True, stream=True) as stream:
        events = []
        for event in stream:
            events.append(event.to_dict())
            if event.type == "response.in_progress":
                client.responses.cancel(events[0]["response"]["id"])
    validate_response_event(events[-1])
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["status"] == "cancelled"
    assert not any(e["type"] == "response.output_text.delta" for e in events)


def test_polling_a_background_stream_from_a_second_reader(client):
    queued = client.responses.create(model=MODEL, input="Two readers.", background=True, stream=True)
    response_id = next(iter(queued)).response.id
    replay = [e.to_dict() for e in client.responses.retrieve(response_id, stream=True)]
    assert replay[0]["type"] == "response.created" and replay[-1]["type"] == "response.completed"
    queued.close()
