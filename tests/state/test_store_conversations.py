"""Conversations through the official SDK against a live server: create, retrieve, update,
delete, their items, and responses that read and extend them."""
from __future__ import annotations

import httpx
import openai
import pytest

from oai_schemas import validate, validate_error_body
from our_spec import check_exchange

MODEL = "gpt-4o"


def texts(items) -> list[tuple[str, str]]:
    return [(item.role, item.content[0].text) for item in items]


def test_create_and_retrieve_a_conversation(client):
    raw = client.conversations.with_raw_response.create(metadata={"topic": "demo"},
                                                        items=[{"role": "user", "content": "Hello!"}])
    check_exchange(raw.http_response)
    validate("ConversationResource", raw.http_response.json())
    created = raw.parse()
    assert created.id.startswith("conv_") and created.object == "conversation"
    got = client.conversations.retrieve(created.id)
    assert (got.id, got.metadata, got.created_at) == (created.id, {"topic": "demo"}, created.created_at)
    assert texts(client.conversations.items.list(created.id)) == [("user", "Hello!")]


def test_an_empty_conversation(client, server):
    created = client.conversations.create()
    assert created.metadata == {}
    page = httpx.get(f"{server.base}/conversations/{created.id}/items").json()
    assert page == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
    validate("ConversationItemList", page)     # with the empty-list departure (openapi/departures.yaml)


def test_a_conversation_needs_no_request_body(server):
    reply = httpx.post(f"{server.base}/conversations")
    assert reply.status_code == 200 and reply.json()["object"] == "conversation"


def test_update_replaces_the_metadata(client):
    created = client.conversations.create(metadata={"a": "1"})
    updated = client.conversations.update(created.id, metadata={"b": "2"})
    assert updated.metadata == {"b": "2"}
    assert client.conversations.retrieve(created.id).metadata == {"b": "2"}


def test_delete_a_conversation(client):
    created = client.conversations.create(items=[{"role": "user", "content": "bye"}])
    raw = client.conversations.with_raw_response.delete(created.id)
    validate("DeletedConversationResource", raw.http_response.json())
    deleted = raw.parse()
    assert (deleted.id, deleted.object, deleted.deleted) == (created.id, "conversation.deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.list(created.id)


def test_unknown_conversation_is_404(client):
    for call in (lambda: client.conversations.retrieve("conv_nope"),
                 lambda: client.conversations.delete("conv_nope"),
                 lambda: client.conversations.update("conv_nope", metadata={}),
                 lambda: client.conversations.items.create("conv_nope", items=[{"role": "user", "content": "x"}])):
        with pytest.raises(openai.NotFoundError) as exc:
            call()
        validate_error_body(exc.value.response.json())


def test_add_list_retrieve_and_delete_items(client):
    conversation = client.conversations.create()
    raw = client.conversations.items.with_raw_response.create(conversation.id, items=[
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello!"}]},
        {"type": "message", "role": "user", "content": "How are you?"}])
    validate("ConversationItemList", raw.http_response.json())
    added = raw.parse()
    assert texts(added.data) == [("user", "Hello!"), ("user", "How are you?")]
    first, second = added.data
    got = client.conversations.items.retrieve(second.id, conversation_id=conversation.id)
    assert (got.id, got.content[0].text) == (second.id, "How are you?")
    after_delete = client.conversations.items.delete(first.id, conversation_id=conversation.id)
    assert after_delete.id == conversation.id and after_delete.object == "conversation"
    assert [i.id for i in client.conversations.items.list(conversation.id)] == [second.id]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(first.id, conversation_id=conversation.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.delete(first.id, conversation_id=conversation.id)


def test_items_paginate(client):
    conversation = client.conversations.create(
        items=[{"role": "user", "content": f"m{i}"} for i in range(7)])
    page = client.conversations.items.list(conversation.id, limit=3, order="asc")
    assert [i.content[0].text for i in page.data] == ["m0", "m1", "m2"] and page.has_more
    everything = [i.content[0].text for i in client.conversations.items.list(conversation.id, limit=3, order="asc")]
    assert everything == [f"m{i}" for i in range(7)]
    newest = client.conversations.items.list(conversation.id, limit=2)
    assert [i.content[0].text for i in newest.data] == ["m6", "m5"]


def test_a_response_in_a_conversation_appends_its_input_and_output(client):
    conversation = client.conversations.create(items=[{"role": "user", "content": "Hi there."}])
    response = client.responses.create(model=MODEL, input="What's new?", conversation=conversation.id)
    assert response.conversation.id == conversation.id
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert texts(items) == [("user", "Hi there."), ("user", "What's new?"),
                            ("assistant", response.output_text)]
    assert items[-1].id == response.output[-1].id
    validate("ConversationItem", items[-1].to_dict())


def test_a_conversation_is_the_history_of_its_responses(client):
    conversation = client.conversations.create(items=[{"role": "user", "content": "Hi there."}])
    first = client.responses.create(model=MODEL, input="Tell me more.", conversation={"id": conversation.id})
    second = client.responses.create(model=MODEL, input="And then?", conversation=conversation.id)
    explicit = client.responses.create(model=MODEL, input=[
        {"role": "user", "content": "Hi there."}, {"role": "user", "content": "Tell me more."},
        {"role": "assistant", "content": first.output_text}, {"role": "user", "content": "And then?"}])
    assert second.usage.input_tokens == explicit.usage.input_tokens
    assert len(list(client.conversations.items.list(conversation.id))) == 5   # 1 + 2 per response


def test_a_streamed_response_appends_to_its_conversation(client):
    conversation = client.conversations.create()
    with client.responses.stream(model=MODEL, input="Stream it.", conversation=conversation.id) as stream:
        final = stream.get_final_response()
    assert texts(client.conversations.items.list(conversation.id, order="asc")) == [
        ("user", "Stream it."), ("assistant", final.output_text)]


def test_a_response_in_an_unknown_conversation_is_404(client):
    with pytest.raises(openai.NotFoundError) as exc:
        client.responses.create(model=MODEL, input="x", conversation="conv_missing")
    assert exc.value.response.json()["error"]["param"] == "conversation"
