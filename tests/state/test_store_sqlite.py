"""The SQLite store's plumbing, in process: writes of one loop iteration share a commit and
are read back at once; a write that finds another process holding the lock waits on the
store's thread (calls made meanwhile follow it, in order); a failing call undoes only itself;
every write is committed (readable by another connection) when it returns."""
from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

from llmsim.state.store import Bounds, StoredResponse
from llmsim.state.store.sqlite import SqliteStore


def record(n: int) -> StoredResponse:
    return StoredResponse(f"resp_{n}", {"id": f"resp_{n}", "status": "completed", "output": []})


def stored_ids(path: str) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[0] for row in db.execute("SELECT id FROM responses")}


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "store.sqlite3")


async def test_concurrent_writes_share_a_commit_and_are_committed_when_they_return(path):
    store = SqliteStore(path, Bounds(100, None))
    await store.put_response(record(0))              # the first call creates the file (thread)
    commits = store._commits
    await asyncio.gather(*(store.put_response(record(n)) for n in range(1, 21)))
    assert store._commits == commits + 1
    assert stored_ids(path) == {f"resp_{n}" for n in range(21)}
    await store.close()


async def test_a_write_reads_back_in_the_same_iteration(path):
    store = SqliteStore(path, Bounds(100, None))
    await store.put_response(record(0))
    put = asyncio.ensure_future(store.put_response(record(1)))
    got = asyncio.ensure_future(store.get_response("resp_1"))
    await asyncio.gather(put, got)
    assert got.result().id == "resp_1"
    await store.close()


async def test_a_write_waits_for_another_process_lock_on_the_thread(path):
    store = SqliteStore(path, Bounds(100, None))
    await store.put_response(record(0))
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")                 # another process writes
    put = asyncio.ensure_future(store.put_response(record(1)))
    got = asyncio.ensure_future(store.get_response("resp_1"))   # follows the write
    await asyncio.sleep(0.2)
    assert not put.done() and not got.done()
    other.execute("COMMIT")
    await asyncio.wait_for(asyncio.gather(put, got), 10)
    assert got.result().id == "resp_1"
    assert stored_ids(path) == {"resp_0", "resp_1"}
    await store.put_response(record(2))             # back on the loop
    assert stored_ids(path) == {"resp_0", "resp_1", "resp_2"}
    other.close()
    await store.close()


async def test_a_failing_call_undoes_only_itself(path):
    store = SqliteStore(path, Bounds(100, None))
    await store.put_response(record(0))

    def boom(tx):
        tx.db.execute("DELETE FROM responses")
        raise RuntimeError("boom")
    results = await asyncio.gather(store.put_response(record(1)), store._write(boom),
                                   store.put_response(record(2)), return_exceptions=True)
    assert isinstance(results[1], RuntimeError)
    assert stored_ids(path) == {"resp_0", "resp_1", "resp_2"}
    await store.close()


async def test_the_oldest_are_evicted_within_one_commit(path):
    store = SqliteStore(path, Bounds(3, None))
    await asyncio.gather(*(store.put_response(record(n)) for n in range(6)))
    assert [await store.get_response(f"resp_{n}") is None for n in range(6)] == [True] * 3 + [False] * 3
    await store.close()


async def test_the_wal_file_stays_bounded_under_steady_writes(path, monkeypatch):
    """Checkpoints run while writes keep coming; each must let the WAL start over."""
    monkeypatch.setattr("llmsim.state.store.sqlite.MAINTAIN_EVERY", 20)
    store = SqliteStore(path, Bounds(50, None))
    for n in range(3000):                     # one commit each, while the thread checkpoints
        frames = [b'event: e\ndata: {"pad":"%s"}\n\n' % os.urandom(1500).hex().encode() for _ in range(4)]
        await store.put_response(record(n), frames)
    await store.flush()
    assert Path(path + "-wal").stat().st_size <= 24 << 20    # it grew past 100 MB when checkpoints lagged
    await store.close()


async def test_a_file_from_before_frames_moved_into_the_row_still_replays(path):
    frames = [b'event: e\ndata: {"n":%d}\n\n' % n for n in range(3)]
    with sqlite3.connect(path) as db:         # the earlier layout: raw frames in `chunks`
        db.executescript("""
            CREATE TABLE responses (n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, expires REAL NOT NULL,
                status TEXT NOT NULL, events INTEGER NOT NULL, response BLOB NOT NULL, meta BLOB NOT NULL);
            CREATE TABLE chunks (response_n INTEGER NOT NULL REFERENCES responses (n) ON DELETE CASCADE,
                first_seq INTEGER NOT NULL, count INTEGER NOT NULL, frames BLOB NOT NULL,
                PRIMARY KEY (response_n, first_seq)) WITHOUT ROWID;""")
        db.execute("INSERT INTO responses VALUES (1, 'resp_old', 9e18, 'completed', 3, ?, '{}')",
                   (b'{"id":"resp_old","status":"completed","output":[]}',))
        db.execute("INSERT INTO chunks VALUES (1, 0, 3, ?)", (b"".join(frames),))
    store = SqliteStore(path, Bounds(10, None))
    await store.put_response(record(1), frames)           # opens (and upgrades) the file
    assert await store.events("resp_old", 0) == (frames[1:], "completed")
    assert await store.events("resp_1", -1) == (frames, "completed")
    await store.close()
