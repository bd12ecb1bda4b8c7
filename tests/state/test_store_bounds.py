"""The store is bounded and persistent, seen through the official SDK against live servers:
entries expire after `--store-ttl-s`, the oldest are evicted beyond `--store-max-entries`
(both read as 404, never as an error), and a file-backed store survives a restart."""
from __future__ import annotations

import time

import openai
import pytest

from conftest import LiveServer

pytestmark = pytest.mark.live

MODEL = "gpt-4o"


TTL_S = 2.0


def test_expired_entries_are_a_404(live_server_factory):
    client = live_server_factory("--profile", "instant", "--store-ttl-s", str(TTL_S)).client()
    created = client.responses.create(model=MODEL, input="Short-lived.")
    conversation = client.conversations.create(items=[{"role": "user", "content": "hi"}])
    assert client.responses.retrieve(created.id).id == created.id
    assert len(client.conversations.items.list(conversation.id).data) == 1
    time.sleep(TTL_S + 0.5)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model=MODEL, input="Later.", previous_response_id=created.id)
    assert exc.value.response.json()["error"]["code"] == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.list(conversation.id)


def test_the_oldest_responses_are_evicted_beyond_max_entries(live_server_factory):
    client = live_server_factory("--profile", "instant", "--store-max-entries", "3").client()
    created = [client.responses.create(model=MODEL, input=f"n{i}") for i in range(5)]
    for evicted in created[:2]:
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(evicted.id)
    assert [client.responses.retrieve(r.id).id for r in created[2:]] == [r.id for r in created[2:]]


@pytest.mark.parametrize("store", ["lmdb:store.lmdb", "store.sqlite3"])
def test_a_file_store_survives_a_restart(tmp_path, store):
    kind, _, name = store.rpartition(":")
    path = f"{kind}:{tmp_path / name}" if kind else str(tmp_path / name)
    first = LiveServer("--profile", "instant", "--store", path)
    try:
        client = first.client()
        created = client.responses.create(model=MODEL, input="Keep me.")
        conversation = client.conversations.create(items=[{"role": "user", "content": "Still here?"}])
    finally:
        first.stop()
    second = LiveServer("--profile", "instant", "--store", path)
    try:
        client = second.client()
        assert client.responses.retrieve(created.id).output_text == created.output_text
        follow_up = client.responses.create(model=MODEL, input="Yes.", previous_response_id=created.id)
        assert follow_up.usage.input_tokens > created.usage.input_tokens
        [item] = client.conversations.items.list(conversation.id)
        assert item.content[0].text == "Still here?"
    finally:
        second.stop()
