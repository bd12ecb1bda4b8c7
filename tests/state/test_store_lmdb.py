"""The LMDB store (the default of `serve --workers N`), in process: what one opening writes another reads at
once; the oldest entries go beyond `max_entries`, with what hangs off them; expired entries
read as missing and are swept (tests/state/test_store_backends.py: what every backend does)."""
from __future__ import annotations

import asyncio
import multiprocessing
import os

import lmdb
import pytest

import llmsim.state.store.lmdb as lmdb_store
from llmsim.errors import ConfigError
from llmsim.state.store import Bounds, Conversation, StoredResponse
from llmsim.state.store.lmdb import LmdbStore


def record(n: int, status: str = "completed") -> StoredResponse:
    return StoredResponse(f"resp_{n}", {"id": f"resp_{n}", "status": status, "output": []})


def frames(*names: str) -> list[bytes]:
    return [b'event: %s\ndata: {"type":"%s"}\n\n' % (name.encode(), name.encode()) for name in names]


def rows(store: LmdbStore, table: str) -> int:
    return store._transact(lambda txn: txn.stat(store.db[table])["entries"])


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
    assert await store.events("resp_5", -1) == (frames("a"), "completed")
    assert rows(store, "responses") == 3
    await store.close()


async def test_an_evicted_response_takes_the_frames_appended_to_it(path):
    store = LmdbStore(path, Bounds(1, None))
    await store.put_response(record(1, "in_progress"), frames("created"))
    await store.append_events("resp_1", frames("delta"))
    await store.append_events("resp_1", frames("done"), {"id": "resp_1", "status": "completed"})
    await store.put_response(record(2))
    assert rows(store, "frames") == 0
    await store.close()


async def test_an_evicted_conversation_takes_its_items(path):
    store = LmdbStore(path, Bounds(1, None))
    await store.put_conversation(Conversation("conv_1", 1, {}))
    await store.add_items("conv_1", [{"id": "msg_1", "type": "message"}])
    await store.put_conversation(Conversation("conv_2", 2, {}))
    assert await store.get_conversation("conv_1") is None
    assert await store.conversation_items("conv_1") is None
    assert rows(store, "items") == 0
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
    assert rows(store, "responses") == 3        # resp_1's row is gone, not just unreadable
    assert await store.get_response("resp_4") is not None
    await store.close()


async def test_replacing_a_response_drops_its_old_frames(path):
    store = LmdbStore(path, Bounds(10, None))
    await store.put_response(record(1), frames("old", "old"))
    await store.put_response(record(1), frames("new"))
    assert await store.events("resp_1", -1) == (frames("new"), "completed")
    await store.close()


def big_frames(n: int) -> list[bytes]:
    return [b'event: e\ndata: {"n":%d,"pad":"%s"}\n\n' % (n, os.urandom(20000).hex().encode())]


async def test_the_map_grows_when_a_write_fills_it(path, monkeypatch):
    monkeypatch.setattr(lmdb_store, "MAP_SIZE", 1 << 20)
    store = LmdbStore(path, Bounds(100, None))
    written = [big_frames(n) for n in range(40)]          # ~1.6 MB that LZ4 cannot shrink
    for n, frames in enumerate(written):
        await store.put_response(record(n), frames)
    assert [(await store.events(f"resp_{n}", -1))[0] for n in (0, 39)] == [written[0], written[39]]
    await store.close()


def fill(path: str, count: int) -> None:
    """In another process: `count` big responses (the map grows past what we opened with)."""
    async def main():
        store = LmdbStore(path, Bounds(100, None))
        for n in range(count):
            await store.put_response(record(n), big_frames(n))
        await store.close()
    asyncio.run(main())


async def test_a_process_follows_the_map_another_process_grew(path, monkeypatch):
    monkeypatch.setattr(lmdb_store, "MAP_SIZE", 1 << 20)
    store = LmdbStore(path, Bounds(100, None))
    await store.put_response(record(100))
    child = multiprocessing.get_context("spawn").Process(target=fill, args=(path, 40))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert len((await store.events("resp_39", -1))[0]) == 1
    await store.put_response(record(101), big_frames(101))
    assert await store.get_response("resp_101") is not None
    await store.close()


async def test_a_store_written_in_another_layout_is_refused_by_name(path):
    store = LmdbStore(path, Bounds(10, None))
    await store.put_response(record(1))
    store._transact(lambda txn: txn.delete(b"format", db=store.db["meta"]), write=True)   # as format 1 left it
    await store.close()
    with pytest.raises(ConfigError, match="another llmsim version.*remove the directory"):
        LmdbStore(path, Bounds(10, None))         # on opening: start-up fails, not a request


def committed(store: LmdbStore) -> int:
    return store._open().info()["last_txnid"]       # LMDB numbers each committed write


async def test_writes_called_in_one_loop_step_share_one_commit(path):
    store = LmdbStore(path, Bounds(100, None))
    before = committed(store)
    await asyncio.gather(*(store.put_response(record(n), frames("a")) for n in range(20)))
    assert committed(store) == before + 1
    reader = LmdbStore(path, Bounds(100, None))
    assert [(await reader.get_response(f"resp_{n}")).events for n in range(20)] == [1] * 20
    await reader.close()
    await store.close()


async def test_a_read_sees_a_write_called_before_it_in_the_same_step(path):
    store = LmdbStore(path, Bounds(10, None))
    put = asyncio.ensure_future(store.put_response(record(1)))
    got = asyncio.ensure_future(store.get_response("resp_1"))
    await asyncio.gather(put, got)
    assert got.result().id == "resp_1"
    await store.close()


async def test_a_write_that_fails_fails_only_its_own_caller(path):
    store = LmdbStore(path, Bounds(10, None))
    too_long = StoredResponse("resp_" + "x" * 600, {"status": "completed"})    # LMDB keys: <= 511 bytes
    results = await asyncio.gather(store.put_response(record(1)), store.put_response(too_long),
                                   store.put_response(record(2)), return_exceptions=True)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], lmdb.Error)
    assert [await store.get_response(f"resp_{n}") is not None for n in (1, 2)] == [True, True]
    await store.close()
