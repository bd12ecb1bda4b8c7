"""Stored chat completions (`store: true`) through the openai SDK against a live server, on
every store (memory, LMDB, SQLite, Redis): retrieve, list (filtered by metadata and model,
paged), the request's messages, metadata updates and deletion."""
from __future__ import annotations

import uuid

import httpx
import openai
import pytest

import oai_schemas

STORES = ["memory", "lmdb", "sqlite", "redis"]


@pytest.fixture(scope="module", params=STORES)
def served(request, live_server_factory, tmp_path_factory):
    kind = request.param
    if kind == "memory":
        store = "memory"
    elif kind == "lmdb":
        store = f"lmdb:{tmp_path_factory.mktemp('chats') / 'store.lmdb'}"
    elif kind == "sqlite":
        store = str(tmp_path_factory.mktemp("chats") / "store.sqlite3")
    else:
        store = request.getfixturevalue("redis_url")
    return live_server_factory("--profile", "instant", "--store", store)


@pytest.fixture(scope="module")
def sdk(served):
    return served.client()


def create(sdk, text="Hello there", **kwargs):
    return sdk.chat.completions.create(model=kwargs.pop("model", "gpt-4o"), store=True,
                                       messages=[{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": text}], **kwargs)


def test_a_stored_completion_is_retrieved_as_it_was_answered(sdk):
    made = create(sdk, metadata={"topic": "greeting"})
    got = sdk.chat.completions.retrieve(made.id)
    assert got.id == made.id and got.choices[0].message.content == made.choices[0].message.content
    assert got.usage.total_tokens == made.usage.total_tokens and got.metadata == {"topic": "greeting"}


def test_a_completion_without_store_is_not_kept(sdk):
    made = sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.retrieve(made.id)


def test_a_streamed_completion_is_stored_too(sdk):
    chunks = list(sdk.chat.completions.create(model="gpt-4o", store=True, stream=True,
                                              messages=[{"role": "user", "content": "stream"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert sdk.chat.completions.retrieve(chunks[0].id).choices[0].message.content == text


def test_the_list_filters_by_metadata_and_model(sdk):
    run = uuid.uuid4().hex
    a = create(sdk, metadata={"run": run, "kind": "a"})
    b = create(sdk, metadata={"run": run, "kind": "b"}, model="gpt-4o-mini")
    create(sdk, metadata={"run": "other"})
    assert [c.id for c in sdk.chat.completions.list(metadata={"run": run})] == [a.id, b.id]
    assert [c.id for c in sdk.chat.completions.list(metadata={"run": run, "kind": "b"})] == [b.id]
    assert [c.id for c in sdk.chat.completions.list(metadata={"run": run}, model="gpt-4o")] == [a.id]


def test_the_list_pages_in_either_order(sdk):
    run = uuid.uuid4().hex
    made = [create(sdk, metadata={"run": run}).id for _ in range(3)]
    first = sdk.chat.completions.list(metadata={"run": run}, limit=2)
    assert [c.id for c in first.data] == made[:2] and first.has_more
    assert [c.id for c in first] == made                      # the SDK follows `after`
    newest = sdk.chat.completions.list(metadata={"run": run}, order="desc", limit=1)
    assert [c.id for c in newest.data] == [made[-1]]


def test_the_messages_are_the_requests_with_ids(sdk):
    made = create(sdk, "What is the tide?")
    messages = sdk.chat.completions.messages.list(made.id)
    assert [(m.role, m.content) for m in messages] == [("system", "Be brief."), ("user", "What is the tide?")]
    assert [m.id for m in messages.data] == [f"{made.id}-0", f"{made.id}-1"]
    later = sdk.chat.completions.messages.list(made.id, after=f"{made.id}-0")
    assert [m.content for m in later.data] == ["What is the tide?"]


def test_an_update_replaces_the_metadata(sdk):
    run = uuid.uuid4().hex
    made = create(sdk, metadata={"run": run, "stage": "draft"})
    updated = sdk.chat.completions.update(made.id, metadata={"run": run, "stage": "final"})
    assert updated.metadata == {"run": run, "stage": "final"}
    assert [c.id for c in sdk.chat.completions.list(metadata={"stage": "final", "run": run})] == [made.id]
    assert list(sdk.chat.completions.list(metadata={"stage": "draft", "run": run})) == []


def test_a_deleted_completion_is_gone(sdk):
    made = create(sdk)
    deleted = sdk.chat.completions.delete(made.id)
    assert deleted.deleted and deleted.id == made.id and deleted.object == "chat.completion.deleted"
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.messages.list(made.id)


def test_bodies_match_openais_schemas(served, sdk):
    run = uuid.uuid4().hex
    made = create(sdk, metadata={"run": run})
    base = served.base
    oai_schemas.validate("CreateChatCompletionResponse", httpx.get(f"{base}/chat/completions/{made.id}").json())
    oai_schemas.validate("ChatCompletionList",
                         httpx.get(f"{base}/chat/completions", params={"metadata[run]": run}).json())
    oai_schemas.validate("ChatCompletionMessageList", httpx.get(f"{base}/chat/completions/{made.id}/messages").json())
    oai_schemas.validate("ChatCompletionDeleted", httpx.delete(f"{base}/chat/completions/{made.id}").json())
