"""What every embedded backend does the same way, in process (memory, LMDB, SQLite; Redis in
tests/state/test_store_shared.py): appends are conditional and replays span them; conversation
items keep their order and are deleted by id; a deletion answers whether there was an entry."""
from __future__ import annotations

import pytest

from llmsim.state.store import Bounds, Conversation, StoredResponse
from llmsim.state.store.lmdb import LmdbStore
from llmsim.state.store.memory import MemoryStore
from llmsim.state.store.sqlite import SqliteStore

BACKENDS = {
    "memory": lambda tmp_path, bounds: MemoryStore(bounds),
    "lmdb": lambda tmp_path, bounds: LmdbStore(str(tmp_path / "store.lmdb"), bounds),
    "sqlite": lambda tmp_path, bounds: SqliteStore(str(tmp_path / "store.sqlite3"), bounds),
}


@pytest.fixture(params=list(BACKENDS))
async def store(request, tmp_path):
    opened = BACKENDS[request.param](tmp_path, Bounds(10, None))
    yield opened
    await opened.close()


def record(n: int, status: str = "completed") -> StoredResponse:
    return StoredResponse(f"resp_{n}", {"id": f"resp_{n}", "status": status, "output": []})


def frames(*names: str) -> list[bytes]:
    return [b'event: %s\ndata: {"type":"%s"}\n\n' % (name.encode(), name.encode()) for name in names]


async def test_appends_are_conditional_and_replays_span_them(store):
    await store.put_response(record(1, "in_progress"), frames("created", "delta"))
    assert not await store.append_events("resp_1", frames("late"), expect_events=1)
    assert await store.append_events("resp_1", frames("done"), {"id": "resp_1", "status": "completed"},
                                     expect_events=2)
    assert not await store.append_events("resp_1", frames("after"))         # no longer active
    assert await store.events("resp_1", 0) == (frames("delta", "done"), "completed")
    got = await store.get_response("resp_1")
    assert (got.events, got.status) == (3, "completed")


async def test_items_are_kept_in_order_and_deleted_by_id(store):
    await store.put_conversation(Conversation("conv_1", 1, {"k": "v"}))
    await store.add_items("conv_1", [{"id": f"msg_{n}"} for n in range(12)])
    assert await store.delete_item("conv_1", "msg_3")
    assert not await store.delete_item("conv_1", "msg_3")
    assert [item["id"] for item in await store.conversation_items("conv_1")] == \
        [f"msg_{n}" for n in range(12) if n != 3]
    assert await store.get_item("conv_1", "msg_11") == {"id": "msg_11"}
    assert await store.get_item("conv_1", "msg_3") is None
    await store.put_conversation(Conversation("conv_1", 1, {"k": "w"}))         # metadata only
    assert len(await store.conversation_items("conv_1")) == 11
    assert (await store.get_conversation("conv_1")).metadata == {"k": "w"}


async def test_deleting_a_response_or_conversation_answers_whether_it_was_there(store):
    await store.put_response(record(1), frames("a"))
    await store.put_conversation(Conversation("conv_1", 1, {}))
    assert await store.delete_response("resp_1") and not await store.delete_response("resp_1")
    assert await store.delete_conversation("conv_1") and not await store.delete_conversation("conv_1")
    assert await store.events("resp_1", -1) == ([], None)
