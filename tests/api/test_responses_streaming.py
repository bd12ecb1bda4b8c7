"""POST /responses with stream=true: SSE framing, event order, sequence numbers, ids and
indexes, and the official SDK's stream helper. Every event is checked against OpenAI's
schema for its type and, where it carries a response, our ResponseObject."""
from __future__ import annotations

import httpx
import pytest

import sse
from our_spec import check_events, check_exchange

MESSAGE_EVENTS = ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
                  "response.output_text.done", "response.content_part.done", "response.output_item.done"]
SUMMARY_EVENTS = ["response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                  "response.reasoning_summary_text.done", "response.reasoning_summary_part.done"]


def stream(server, **body) -> list[tuple[str, dict]]:
    response = httpx.post(f"{server.base}/responses", json={"input": "hi", "stream": True, **body}, timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    check_exchange(response)
    events = sse.parse(response.text)
    check_events(events)
    return events


def collapse(types: list[str]) -> list[str]:
    """Event types with runs of the same delta type folded into one."""
    out = []
    for kind in types:
        if not (out and out[-1] == kind and kind.endswith(".delta")):
            out.append(kind)
    return out


def test_every_frame_is_event_line_then_data_line(server):
    text = httpx.post(f"{server.base}/responses", json={"model": "gpt-4o", "input": "hi", "stream": True}).text
    frames = [f for f in text.split("\n\n") if f]
    assert frames and text.endswith("\n\n")
    for frame in frames:
        event_line, data_line = frame.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: {")


def test_event_order_without_reasoning(server):
    events = stream(server, model="gpt-4o")
    assert collapse([name for name, _ in events]) == [
        "response.created", "response.in_progress", *MESSAGE_EVENTS, "response.completed"]


def test_event_order_with_reasoning_and_summary(server):
    events = stream(server, model="o3", reasoning={"summary": "auto"})
    assert collapse([name for name, _ in events]) == [
        "response.created", "response.in_progress",
        "response.output_item.added", *SUMMARY_EVENTS, "response.output_item.done",
        *MESSAGE_EVENTS, "response.completed"]


def test_reasoning_without_summary_sends_no_summary_events(server):
    events = stream(server, model="o3")
    assert collapse([name for name, _ in events]) == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.output_item.done",
        *MESSAGE_EVENTS, "response.completed"]


@pytest.mark.parametrize("model", ["gpt-4o", "o3"])
def test_sequence_numbers_are_consecutive_from_zero(server, model):
    events = stream(server, model=model, reasoning={"summary": "detailed"})
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))


def test_item_ids_and_indexes_point_at_their_items(server):
    events = stream(server, model="o3", reasoning={"summary": "concise"})
    final = events[-1][1]["response"]
    ids = [item["id"] for item in final["output"]]
    for name, data in events:
        if name.startswith("response.output_item."):
            assert data["item"]["id"] == ids[data["output_index"]]
        elif "item_id" in data:
            assert data["item_id"] == ids[data["output_index"]], name
        if "content_index" in data:
            assert (data["output_index"], data["content_index"]) == (1, 0)
        if "summary_index" in data:
            assert (data["output_index"], data["summary_index"]) == (0, 0)


def test_message_is_output_index_zero_without_reasoning(server):
    events = stream(server, model="gpt-4o")
    assert {data["output_index"] for _, data in events if "output_index" in data} == {0}


def test_created_and_in_progress_carry_the_full_response(server):
    events = stream(server, model="gpt-4o", instructions="Be brief.", metadata={"k": "v"}, temperature=0.5)
    final = events[-1][1]["response"]
    for _, data in events[:2]:
        response = data["response"]
        assert response["status"] == "in_progress" and response["output"] == []
        assert response["id"] == final["id"] and response["created_at"] == final["created_at"]
        assert (response["instructions"], response["metadata"], response["temperature"]) == \
            ("Be brief.", {"k": "v"}, 0.5)


def test_text_deltas_and_done_carry_empty_logprobs(server):
    events = stream(server, model="gpt-4o")
    texts = [data for name, data in events if name in ("response.output_text.delta", "response.output_text.done")]
    assert texts and all(data["logprobs"] == [] for data in texts)


def test_one_delta_per_output_token(server):
    events = stream(server, model="gpt-4o")
    deltas = [data for name, data in events if name == "response.output_text.delta"]
    assert len(deltas) == events[-1][1]["response"]["usage"]["output_tokens"]


def test_concatenated_deltas_equal_the_final_text(server):
    events = stream(server, model="o3", reasoning={"summary": "auto"})
    final = events[-1][1]["response"]
    text = "".join(data["delta"] for name, data in events if name == "response.output_text.delta")
    summary = "".join(d["delta"] for name, d in events if name == "response.reasoning_summary_text.delta")
    assert text == final["output_text"] == final["output"][1]["content"][0]["text"]
    assert summary == final["output"][0]["summary"][0]["text"]


def test_completed_event_carries_usage(server):
    events = stream(server, model="gpt-4o")
    name, data = events[-1]
    assert name == "response.completed"
    assert data["response"]["usage"]["output_tokens"] == 100


def test_max_output_tokens_ends_with_response_incomplete(server):
    events = stream(server, model="gpt-4o", max_output_tokens=5)
    name, data = events[-1]
    assert name == "response.incomplete"
    assert data["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    done = [d for n, d in events if n == "response.output_item.done"]
    assert done[-1]["item"]["status"] == "incomplete"


def test_sdk_stream_and_final_response(client):
    with client.responses.stream(model="o3", input="hi", reasoning={"summary": "auto"}) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert "".join(deltas) == final.output_text
    assert [item.type for item in final.output] == ["reasoning", "message"]


def test_sdk_create_with_stream_true_yields_typed_events(client):
    events = list(client.responses.create(model="gpt-4o", input="hi", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert events[-1].response.output_text == "".join(
        e.delta for e in events if e.type == "response.output_text.delta")


async def test_async_sdk_stream(server):
    client = server.async_client()
    async with client.responses.stream(model="gpt-4o", input="hi") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.usage.output_tokens == 100


def test_streamed_final_response_equals_the_non_streamed_shape(client):
    plain = client.responses.create(model="o3", input="hi", reasoning={"summary": "auto"})
    with client.responses.stream(model="o3", input="hi", reasoning={"summary": "auto"}) as stream:
        streamed = stream.get_final_response()
    def shape(response):
        return sorted(response.model_dump(exclude={"id", "created_at", "completed_at", "output"}).items())
    assert shape(streamed) == shape(plain)
    assert [i.type for i in streamed.output] == [i.type for i in plain.output]
