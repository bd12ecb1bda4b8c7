"""Stored responses through the official SDK against a live server: retrieve, delete, input
items and their pagination, chaining with previous_response_id, store:false, the
input-token count, and replay of a streamed response's events."""
from __future__ import annotations

import httpx
import openai
import pytest

from oai_schemas import validate, validate_error_body, validate_response_event
from our_spec import check_exchange

MODEL = "gpt-4o"


def error_of(exc: openai.APIStatusError) -> dict:
    body = exc.response.json()
    validate_error_body(body)
    return body["error"]


def test_retrieve_returns_the_stored_response(client):
    created = client.responses.create(model=MODEL, input="Remember me.")
    raw = client.responses.with_raw_response.retrieve(created.id)
    check_exchange(raw.http_response)
    validate("Response", raw.http_response.json())
    got = raw.parse()
    assert (got.id, got.status, got.output_text) == (created.id, "completed", created.output_text)
    assert got.usage.input_tokens == created.usage.input_tokens


def test_delete_removes_the_response(client, server):
    created = client.responses.create(model=MODEL, input="Forget me.")
    deleted = httpx.delete(f"{server.base}/responses/{created.id}")
    assert deleted.json() == {"id": created.id, "object": "response.deleted", "deleted": True}
    with pytest.raises(openai.NotFoundError) as exc:
        client.responses.retrieve(created.id)
    assert error_of(exc.value)["code"] == "not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_sdk_delete_returns_none(client):
    created = client.responses.create(model=MODEL, input="Delete me.")
    assert client.responses.delete(created.id) is None


def test_unknown_response_id_is_a_404_error_envelope(client):
    with pytest.raises(openai.NotFoundError) as exc:
        client.responses.retrieve("resp_does_not_exist")
    error = error_of(exc.value)
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "not_found" and error["param"] == "response_id"
    assert "resp_does_not_exist" in error["message"]


def test_unknown_response_id_is_404_for_every_route(server):
    for method, path in [("GET", "/input_items"), ("POST", "/cancel"), ("DELETE", "")]:
        reply = httpx.request(method, f"{server.base}/responses/resp_nope{path}")
        assert reply.status_code == 404, (method, path)
        validate_error_body(reply.json())


MESSAGES = [{"role": "user", "content": f"message {i}"} for i in range(5)]


def test_input_items_list_the_input_with_ids(client, server):
    created = client.responses.create(model=MODEL, input=MESSAGES)
    raw = httpx.get(f"{server.base}/responses/{created.id}/input_items", params={"order": "asc"})
    check_exchange(raw)
    page = raw.json()
    validate("ResponseItemList", page)
    texts = [item["content"][0]["text"] for item in page["data"]]
    assert texts == [m["content"] for m in MESSAGES]
    ids = [item["id"] for item in page["data"]]
    assert len(set(ids)) == 5 and all(i.startswith("msg_") for i in ids)
    assert (page["first_id"], page["last_id"], page["has_more"]) == (ids[0], ids[-1], False)


def test_input_items_read_the_same_every_time(client, server):
    created = client.responses.create(model=MODEL, input=[*MESSAGES, {"type": "function_call_output",
                                                                     "call_id": "call_1", "output": "42"}])
    url = f"{server.base}/responses/{created.id}/input_items"
    first, again = httpx.get(url).json(), httpx.get(url).json()
    validate("ResponseItemList", first)
    assert first == again and first["data"][0]["id"].startswith("fco_")


def test_string_input_is_one_user_message(client):
    created = client.responses.create(model=MODEL, input="Just text.")
    [item] = client.responses.input_items.list(created.id)
    assert (item.type, item.role, item.content[0].type, item.content[0].text) == \
        ("message", "user", "input_text", "Just text.")


def test_input_items_default_to_newest_first(client):
    created = client.responses.create(model=MODEL, input=MESSAGES)
    items = list(client.responses.input_items.list(created.id))
    assert [i.content[0].text for i in items] == [m["content"] for m in reversed(MESSAGES)]


def test_input_items_paginate_with_after_and_limit(client):
    created = client.responses.create(model=MODEL, input=MESSAGES)
    first = client.responses.input_items.list(created.id, limit=2, order="asc")
    assert [i.content[0].text for i in first.data] == ["message 0", "message 1"]
    assert first.has_more is True
    everything = [i.content[0].text for i in client.responses.input_items.list(created.id, limit=2, order="asc")]
    assert everything == [m["content"] for m in MESSAGES]     # the SDK followed `after` cursors
    after = client.responses.input_items.list(created.id, limit=10, order="desc", after=first.data[0].id)
    assert after.data == [] and after.has_more is False


def test_input_items_before_gives_the_previous_page(client, server):
    created = client.responses.create(model=MODEL, input=MESSAGES)
    ids = [i.id for i in client.responses.input_items.list(created.id, order="asc")]
    page = httpx.get(f"{server.base}/responses/{created.id}/input_items",
                     params={"order": "asc", "before": ids[4], "limit": 2}).json()
    assert [i["id"] for i in page["data"]] == ids[2:4] and page["has_more"] is True


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 101}, {"order": "sideways"}])
def test_input_items_bad_query_is_400(server, client, params):
    created = client.responses.create(model=MODEL, input="x")
    reply = httpx.get(f"{server.base}/responses/{created.id}/input_items", params=params)
    assert reply.status_code == 400
    validate_error_body(reply.json())


def test_unknown_cursor_is_400(client):
    created = client.responses.create(model=MODEL, input="x")
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.input_items.list(created.id, after="msg_unknown")
    assert error_of(exc.value)["param"] == "after"


def test_chaining_counts_the_history_as_input(client):
    first = client.responses.create(model=MODEL, input="Tell me a story.")
    second = client.responses.create(model=MODEL, input="Shorter, please.", previous_response_id=first.id)
    explicit = client.responses.create(model=MODEL, input=[
        {"role": "user", "content": "Tell me a story."},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "Shorter, please."}])
    assert second.usage.input_tokens == explicit.usage.input_tokens
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.previous_response_id == first.id


def test_chaining_does_not_carry_instructions_over(client):
    instructions = "You are a pirate. " * 20
    first = client.responses.create(model=MODEL, input="Hello.", instructions=instructions)
    second = client.responses.create(model=MODEL, input="Again.", previous_response_id=first.id)
    explicit = client.responses.create(model=MODEL, input=[
        {"role": "user", "content": "Hello."}, {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "Again."}])
    assert second.usage.input_tokens == explicit.usage.input_tokens
    assert second.instructions is None


def test_a_chain_keeps_the_whole_history(client):
    first = client.responses.create(model=MODEL, input="one")
    second = client.responses.create(model=MODEL, input="two", previous_response_id=first.id)
    third = client.responses.create(model=MODEL, input="three", previous_response_id=second.id)
    items = list(client.responses.input_items.list(third.id, order="asc"))
    assert [(i.role, i.content[0].text) for i in items] == [
        ("user", "one"), ("assistant", first.output_text), ("user", "two"),
        ("assistant", second.output_text), ("user", "three")]
    assert third.usage.input_tokens > second.usage.input_tokens > first.usage.input_tokens


def test_unknown_previous_response_is_400_as_over_the_websocket(client):
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_gone")
    error = error_of(exc.value)
    assert (error["code"], error["param"]) == ("previous_response_not_found", "previous_response_id")


def test_previous_response_and_conversation_together_are_400(client):
    first = client.responses.create(model=MODEL, input="x")
    conversation = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model=MODEL, input="y", previous_response_id=first.id,
                                conversation=conversation.id)
    assert error_of(exc.value)["param"] == "conversation"


def test_store_false_keeps_nothing(client):
    created = client.responses.create(model=MODEL, input="Secret.", store=False)
    assert created.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="More.", previous_response_id=created.id)


def test_streamed_store_false_keeps_nothing(client):
    with client.responses.stream(model=MODEL, input="Secret.", store=False) as stream:
        final = stream.get_final_response()
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(final.id)


def test_input_tokens_counts_what_a_request_would_use(client):
    params = dict(model=MODEL, input="How many tokens is this?", instructions="Count carefully.")
    raw = client.responses.input_tokens.with_raw_response.count(**params)
    check_exchange(raw.http_response)
    validate("TokenCountsResource", raw.http_response.json())
    counted = raw.parse()
    assert counted.object == "response.input_tokens"
    assert counted.input_tokens == client.responses.create(**params).usage.input_tokens


def test_input_tokens_include_the_chained_history(client):
    first = client.responses.create(model=MODEL, input="Start.")
    counted = client.responses.input_tokens.count(model=MODEL, input="Go on.", previous_response_id=first.id)
    second = client.responses.create(model=MODEL, input="Go on.", previous_response_id=first.id)
    assert counted.input_tokens == second.usage.input_tokens


def stream_events(client, **params) -> list[dict]:
    with client.responses.create(stream=True, **params) as stream:
        return [event.to_dict() for event in stream]


def test_a_streamed_response_replays_its_events(client):
    events = stream_events(client, model=MODEL, input="Stream then replay.")
    response_id = events[0]["response"]["id"]
    replayed = [e.to_dict() for e in client.responses.retrieve(response_id, stream=True)]
    for event in replayed:
        validate_response_event(event)
    assert replayed == events


def test_replay_starts_after_the_given_sequence_number(client):
    events = stream_events(client, model=MODEL, input="Resume me.")
    response_id = events[0]["response"]["id"]
    resumed = [e.to_dict() for e in client.responses.retrieve(response_id, stream=True, starting_after=4)]
    assert [e["sequence_number"] for e in resumed] == [e["sequence_number"] for e in events[5:]]
    assert resumed == events[5:]


def test_a_replay_leaves_out_the_keep_alive_comments(live_server_factory):
    server = live_server_factory("--ttft-ms", "150", "--tbt-ms", "1", "--keepalive-ms", "30",
                                 "--target-tokens", "5")
    with httpx.stream("POST", f"{server.base}/responses", timeout=10,
                      json={"model": MODEL, "input": "Wait for it.", "stream": True}) as r:
        streamed = "".join(r.iter_text())
    assert "\n: " in streamed                              # comments while the first token waits
    response_id = streamed.split('"id":"', 1)[1].split('"', 1)[0]
    replayed = httpx.get(f"{server.base}/responses/{response_id}", params={"stream": "true"}, timeout=10).text
    frames = [frame for frame in streamed.split("\n\n") if frame and not frame.startswith(":")]
    assert replayed.split("\n\n")[:-1] == frames


def test_a_streamed_response_reads_back_as_its_last_event_left_it(client):
    events = stream_events(client, model="o3", input="Think, then answer.",
                           reasoning={"effort": "low", "summary": "auto"})
    assert events[-1]["type"] == "response.completed"
    stored = client.responses.with_raw_response.retrieve(events[-1]["response"]["id"])
    validate("Response", stored.http_response.json())
    assert stored.http_response.json() == events[-1]["response"]


def test_a_streamed_response_with_a_long_input_reads_back_and_replays_as_streamed(client):
    events = stream_events(client, model=MODEL, input="word " * 3000)
    assert events[-1]["response"]["usage"]["input_tokens"] > 2048
    response_id = events[-1]["response"]["id"]
    assert client.responses.with_raw_response.retrieve(response_id).http_response.json() == events[-1]["response"]
    assert [e.to_dict() for e in client.responses.retrieve(response_id, stream=True)] == events


def test_a_stream_a_fault_cut_replays_as_the_client_saw_it(server):
    with httpx.stream("POST", f"{server.base}/responses", timeout=10,
                      headers={"x-llmsim-fault": "stream_failed;after_tokens=3"},
                      json={"model": MODEL, "input": "Fail half way.", "stream": True}) as r:
        streamed = "".join(r.iter_text())
    frames = [frame for frame in streamed.split("\n\n") if frame]
    assert "event: response.failed" in frames[-1]
    response_id = streamed.split('"id":"', 1)[1].split('"', 1)[0]
    replayed = httpx.get(f"{server.base}/responses/{response_id}", params={"stream": "true"}, timeout=10).text
    assert replayed.split("\n\n")[:-1] == frames
    stored = httpx.get(f"{server.base}/responses/{response_id}", timeout=10).json()
    assert stored["status"] == "failed"


def test_a_response_that_was_not_streamed_cannot_be_replayed(client):
    created = client.responses.create(model=MODEL, input="Plain.")
    with pytest.raises(openai.BadRequestError) as exc:
        list(client.responses.retrieve(created.id, stream=True))
    assert error_of(exc.value)["param"] == "stream"


def test_v1_and_openai_v1_share_the_store(client, server):
    created = client.responses.create(model=MODEL, input="Both paths.")
    reply = httpx.get(f"{server.url}/openai/v1/responses/{created.id}")
    assert reply.status_code == 200 and reply.json()["id"] == created.id
