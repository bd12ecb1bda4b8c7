"""The LMDB store (serve's default), in process: what one opening writes another reads at
once; the oldest entries go beyond `max_entries`, with what hangs off them; expired entries
read as missing and are swept; appends are conditional; replays span appends."""
from __future__ import annotations

import pytest

import llmsim.store.lmdb as lmdb_store
from llmsim.store import Bounds, Conversation, StoredResponse
from llmsim.store.lmdb import LmdbStore


def record(n: int, status: str = "completed") -> StoredResponse:
    return StoredResponse(f"resp_{n}", {"id": f"resp_{n}", "status": status, "output": []})


def frames(*names: str) -> list[bytes]:
    return [b'event: %s\ndata: {"type":"%s"}\n\n' % (name.encode(), name.encode()) for name in names]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "store.lmdb")


async def test_a_write_is_read_by_another_opening_of_the_store(path):
    writer, reader = LmdbStore(path, Bounds(10, None)), LmdbStore(path, Bounds(10, None))
    await writer.put_response(record(1), frames("a", "b"))
    got = await reader.get_response("resp_1")
    assert (got.response, got.events) == ({"id": "resp_1", "status": "completed", "output": []}, 2)
    await writer.close()
    await reader.close()


async def test_the_oldest_responses_go_beyond_max_entries_with_their_frames(path):
    store = LmdbStore(path, Bounds(3, None))
    for n in range(6):
        await store.put_response(record(n), frames("a"))
    assert [await store.get_response(f"resp_{n}") is None for n in range(6)] == [True] * 3 + [False] * 3
    assert await store.events("resp_1", -1) == ([], None)
    with store._read() as txn:
        assert sum(1 for _ in txn.cursor(db=store.db["frames"])) == 3
    await store.close()


async def test_an_evicted_response_takes_the_frames_appended_to_it(path):
    store = LmdbStore(path, Bounds(1, None))
    await store.put_response(record(1, "in_progress"), frames("created"))
    await store.append_events("resp_1", frames("delta"))
    await store.append_events("resp_1", frames("done"), {"id": "resp_1", "status": "completed"})
    await store.put_response(record(2))
    with store._read() as txn:
        assert txn.stat(store.db["frames"])["entries"] == 0
    await store.close()


async def test_an_evicted_conversation_takes_its_items(path):
    store = LmdbStore(path, Bounds(1, None))
    await store.put_conversation(Conversation("conv_1", 1, {}))
    await store.add_items("conv_1", [{"id": "msg_1", "type": "message"}])
    await store.put_conversation(Conversation("conv_2", 2, {}))
    assert await store.get_conversation("conv_1") is None
    assert await store.conversation_items("conv_1") is None
    with store._read() as txn:
        assert txn.stat(store.db["items"])["entries"] == 0
    await store.close()


async def test_expired_entries_read_as_missing_and_are_swept(path, monkeypatch):
    monkeypatch.setattr(lmdb_store, "SWEEP_EVERY", 4)
    clock = [1000.0]
    monkeypatch.setattr(lmdb_store.time, "time", lambda: clock[0])
    store = LmdbStore(path, Bounds(100, 10.0))
    await store.put_response(record(1))
    clock[0] += 11
    assert await store.get_response("resp_1") is None
    for n in range(2, 5):                       # the fourth write sweeps
        await store.put_response(record(n))
    with store._read() as txn:
        assert txn.get(b"resp_1", db=store.db["responses"]) is None
    assert await store.get_response("resp_4") is not None
    await store.close()


async def test_appends_are_conditional_and_replays_span_them(path):
    store = LmdbStore(path, Bounds(10, None))
    await store.put_response(record(1, "in_progress"), frames("created", "delta"))
    assert not await store.append_events("resp_1", frames("late"), expect_events=1)
    assert await store.append_events("resp_1", frames("done"), {"id": "resp_1", "status": "completed"},
                                     expect_events=2)
    assert not await store.append_events("resp_1", frames("after"))         # no longer active
    assert await store.events("resp_1", 0) == (frames("delta", "done"), "completed")
    assert (await store.get_response("resp_1")).events == 3
    await store.close()


async def test_replacing_a_response_drops_its_old_frames(path):
    store = LmdbStore(path, Bounds(10, None))
    await store.put_response(record(1), frames("old", "old"))
    await store.put_response(record(1), frames("new"))
    assert await store.events("resp_1", -1) == (frames("new"), "completed")
    await store.close()


async def test_items_are_kept_in_order_and_deleted_by_id(path):
    store = LmdbStore(path, Bounds(10, None))
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
    await store.close()


async def test_deleting_a_response_or_conversation_answers_whether_it_was_there(path):
    store = LmdbStore(path, Bounds(10, None))
    await store.put_response(record(1), frames("a"))
    await store.put_conversation(Conversation("conv_1", 1, {}))
    assert await store.delete_response("resp_1") and not await store.delete_response("resp_1")
    assert await store.delete_conversation("conv_1") and not await store.delete_conversation("conv_1")
    assert await store.events("resp_1", -1) == ([], None)
    await store.close()
