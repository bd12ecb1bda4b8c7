"""A full embedded store (`--store-max-bytes`: LMDB's map, SQLite's page limit) with
`store_evict_when_full` on (the default), seen through the official SDK: it evicts its oldest
entries and writes again, so new requests keep succeeding; the oldest read as gone (404),
the newest stay readable."""
from __future__ import annotations

import openai
import pytest

from conftest import LiveServer

pytestmark = pytest.mark.live

MODEL = "gpt-4o"
BIG = "lorem ipsum " * 4000     # ~48 kB of input kept with each response
ROUNDS = 24                     # several times what the store holds


@pytest.mark.parametrize("kind", ["lmdb", "sqlite"])
def test_a_full_store_evicts_its_oldest_and_keeps_writing(tmp_path, kind):
    store = f"lmdb:{tmp_path / 'store'}" if kind == "lmdb" else str(tmp_path / "store.sqlite3")
    server = LiveServer("--profile", "instant", "--store", store, "--store-max-bytes", str(256 * 1024))
    try:
        client = server.client(timeout=10)
        conversation = client.conversations.create(items=[{"role": "user", "content": "The oldest of all."}])
        created = [client.responses.create(model=MODEL, input=BIG, max_output_tokens=16) for _ in range(ROUNDS)]
        gone = []
        for response in created:
            try:
                client.responses.retrieve(response.id)
            except openai.NotFoundError:
                gone.append(response.id)
        kept = len(created) - len(gone)
        print(f"\n{kind}: {ROUNDS} responses of ~48 kB into 256 kB: {len(gone)} evicted, {kept} kept")
        assert gone, "the store never filled up"
        assert gone == [response.id for response in created[:len(gone)]], "the oldest go first"
        newest = client.responses.retrieve(created[-1].id)
        assert newest.output_text == created[-1].output_text
        assert [item.id for item in client.responses.input_items.list(created[-1].id)]
        with pytest.raises(openai.NotFoundError):
            client.conversations.retrieve(conversation.id)      # the oldest conversation went too
    finally:
        server.stop()
