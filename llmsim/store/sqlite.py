"""The embedded store: one SQLite file in WAL mode, shared by every process that opens it.

All calls run on one dedicated thread per process (a connection is not shared across
threads, and a write that waits for another process's lock must not block the event
loop). Each operation is one transaction; `BEGIN IMMEDIATE` makes the conditional append
atomic across processes. Order of creation is the autoincrement key `n`: keeping the newest
`max_entries` means deleting every row with `n <= newest - max_entries`. SSE frames are kept
as one row per write (`chunks`: the frames of sequence numbers first_seq.. concatenated; a
frame ends with a blank line and never contains one), so storing a whole stream is one insert.
"""
from __future__ import annotations

import asyncio
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import orjson

from llmsim.errors import ConfigError
from llmsim.jsonbytes import dumps
from llmsim.store.base import ACTIVE, Bounds, Conversation, StoredResponse

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, expires REAL NOT NULL,
    status TEXT NOT NULL, events INTEGER NOT NULL, response BLOB NOT NULL, meta BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS responses_expires ON responses (expires);
CREATE TABLE IF NOT EXISTS chunks (
    response_n INTEGER NOT NULL REFERENCES responses (n) ON DELETE CASCADE,
    first_seq INTEGER NOT NULL, count INTEGER NOT NULL, frames BLOB NOT NULL,
    PRIMARY KEY (response_n, first_seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS conversations (
    n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, expires REAL NOT NULL,
    record BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS conversations_expires ON conversations (expires);
CREATE TABLE IF NOT EXISTS items (
    conversation_n INTEGER NOT NULL REFERENCES conversations (n) ON DELETE CASCADE,
    pos INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, item BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS items_by_conversation ON items (conversation_n, id);
"""


class SqliteStore:
    def __init__(self, path: str, bounds: Bounds):
        self.path = path
        self.bounds = bounds
        if path != ":memory:":
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"store: cannot create the directory of {path!r}: {exc}") from None
        self._db: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmsim-store")

    # ---- plumbing --------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(SCHEMA)
            self._db = db
        return self._db

    async def _run(self, fn: Callable[..., Any], *args) -> Any:
        def call():
            db = self._connect()
            return fn(db, *args)
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    async def _write(self, fn: Callable[..., Any], *args) -> Any:
        """`fn(db, now, *args)` inside one immediate (write-locked) transaction."""
        def tx(db):
            db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(db, time.time(), *args)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result
        return await self._run(tx)

    def _bound(self, db, table: str, now: float, n: int) -> None:
        db.execute(f"DELETE FROM {table} WHERE expires <= ? OR n <= ?", (now, n - self.bounds.max_entries))

    # ---- responses -------------------------------------------------------------------
    async def put_response(self, record: StoredResponse, frames: Sequence[bytes] = ()) -> None:
        def put(db, now):
            db.execute("DELETE FROM responses WHERE id = ?", (record.id,))
            n = db.execute(
                "INSERT INTO responses (id, expires, status, events, response, meta) VALUES (?,?,?,?,?,?)",
                (record.id, self.bounds.expires(now), record.status, len(frames),
                 dumps(record.response), record.meta_json())).lastrowid
            _insert_chunk(db, n, 0, frames)
            self._bound(db, "responses", now, n)
        await self._write(put)

    async def get_response(self, response_id: str) -> StoredResponse | None:
        def get(db):
            row = db.execute("SELECT response, meta, events FROM responses WHERE id = ? AND expires > ?",
                             (response_id, time.time())).fetchone()
            return row and StoredResponse.from_json(response_id, *row)
        return await self._run(get) or None

    async def delete_response(self, response_id: str) -> bool:
        def delete(db, now):
            return db.execute("DELETE FROM responses WHERE id = ? AND expires > ?",
                              (response_id, now)).rowcount > 0
        return await self._write(delete)

    async def append_events(self, response_id: str, frames: Sequence[bytes],
                            snapshot: dict | None = None, *, expect_events: int | None = None) -> bool:
        def append(db, now):
            row = db.execute("SELECT n, status, events FROM responses WHERE id = ? AND expires > ?",
                             (response_id, now)).fetchone()
            if row is None or row[1] not in ACTIVE or (expect_events is not None and row[2] != expect_events):
                return False
            n, _, count = row
            _insert_chunk(db, n, count, frames)
            if snapshot is None:
                db.execute("UPDATE responses SET events = ?, expires = ? WHERE n = ?",
                           (count + len(frames), self.bounds.expires(now), n))
            else:
                db.execute("UPDATE responses SET events = ?, expires = ?, status = ?, response = ? WHERE n = ?",
                           (count + len(frames), self.bounds.expires(now), snapshot.get("status"),
                            dumps(snapshot), n))
            return True
        return await self._write(append)

    async def events(self, response_id: str, after: int) -> tuple[list[bytes], str | None]:
        def read(db):
            db.execute("BEGIN")
            try:
                row = db.execute("SELECT n, status FROM responses WHERE id = ? AND expires > ?",
                                 (response_id, time.time())).fetchone()
                if row is None:
                    return [], None
                rows = db.execute("SELECT first_seq, frames FROM chunks WHERE response_n = ? "
                                  "AND first_seq + count - 1 > ? ORDER BY first_seq", (row[0], after))
                frames = []
                for first_seq, blob in rows:
                    frames += [f + b"\n\n" for f in blob.split(b"\n\n")[:-1]][max(0, after + 1 - first_seq):]
                return frames, row[1]
            finally:
                db.execute("COMMIT")
        return await self._run(read)

    # ---- conversations ---------------------------------------------------------------
    async def put_conversation(self, conversation: Conversation) -> None:
        def put(db, now):
            updated = db.execute("UPDATE conversations SET record = ?, expires = ? WHERE id = ? AND expires > ?",
                                 (conversation.to_json(), self.bounds.expires(now), conversation.id, now))
            if updated.rowcount:
                return
            n = db.execute("INSERT INTO conversations (id, expires, record) VALUES (?,?,?)",
                           (conversation.id, self.bounds.expires(now), conversation.to_json())).lastrowid
            self._bound(db, "conversations", now, n)
        await self._write(put)

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        def get(db):
            row = db.execute("SELECT record FROM conversations WHERE id = ? AND expires > ?",
                             (conversation_id, time.time())).fetchone()
            return row and Conversation.from_json(conversation_id, row[0])
        return await self._run(get) or None

    async def delete_conversation(self, conversation_id: str) -> bool:
        def delete(db, now):
            return db.execute("DELETE FROM conversations WHERE id = ? AND expires > ?",
                              (conversation_id, now)).rowcount > 0
        return await self._write(delete)

    def _conversation_n(self, db, conversation_id: str, now: float) -> int | None:
        row = db.execute("SELECT n FROM conversations WHERE id = ? AND expires > ?",
                         (conversation_id, now)).fetchone()
        return row[0] if row else None

    async def add_items(self, conversation_id: str, items: Sequence[dict]) -> bool:
        def add(db, now):
            n = self._conversation_n(db, conversation_id, now)
            if n is None:
                return False
            db.executemany("INSERT INTO items (conversation_n, id, item) VALUES (?,?,?)",
                           [(n, item.get("id"), dumps(item)) for item in items])
            db.execute("UPDATE conversations SET expires = ? WHERE n = ?", (self.bounds.expires(now), n))
            return True
        return await self._write(add)

    async def conversation_items(self, conversation_id: str) -> list[dict] | None:
        def read(db):
            n = self._conversation_n(db, conversation_id, time.time())
            if n is None:
                return None
            rows = db.execute("SELECT item FROM items WHERE conversation_n = ? ORDER BY pos", (n,))
            return [orjson.loads(r[0]) for r in rows]
        return await self._run(read)

    async def get_item(self, conversation_id: str, item_id: str) -> dict | None:
        def get(db):
            row = db.execute("SELECT i.item FROM items i JOIN conversations c ON c.n = i.conversation_n "
                             "WHERE c.id = ? AND c.expires > ? AND i.id = ? ORDER BY i.pos LIMIT 1",
                             (conversation_id, time.time(), item_id)).fetchone()
            return row and orjson.loads(row[0])
        return await self._run(get) or None

    async def delete_item(self, conversation_id: str, item_id: str) -> bool:
        def delete(db, now):
            n = self._conversation_n(db, conversation_id, now)
            return n is not None and db.execute("DELETE FROM items WHERE conversation_n = ? AND id = ?",
                                                (n, item_id)).rowcount > 0
        return await self._write(delete)

    async def close(self) -> None:
        def shut(db):
            db.close()
            self._db = None
        if self._db is not None:
            await self._run(shut)
        self._thread.shutdown(wait=False)


def _insert_chunk(db, response_n: int, first_seq: int, frames: Sequence[bytes]) -> None:
    if frames:
        db.execute("INSERT INTO chunks (response_n, first_seq, count, frames) VALUES (?,?,?,?)",
                   (response_n, first_seq, len(frames), b"".join(frames)))
