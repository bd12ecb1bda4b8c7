"""The embedded store: one SQLite file in WAL mode, shared by every process that opens it.

Invariants: calls run on the event loop on a connection that never waits for a lock; the
writes of one loop step share one `BEGIN IMMEDIATE` transaction (`StepBatch`, a savepoint per
call), and a write returns once committed; when another process holds the lock, calls move
to the store's thread, in order. Creation order is the key `n`; expired rows read as missing
at once; a full file evicts by `Eviction`, else 503. Capabilities: leases, attempts.
The story: docs/internals.md#statestoresqlite.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

import orjson

from llmsim.errors import ConfigError
from llmsim.render.jsonbytes import dumps
from llmsim.state.store.capabilities import Capabilities
from llmsim.state.store.base import (ACTIVE, Bounds, Conversation, Eviction, StepBatch,
                                     StoredResponse, frames_after, outages_answered, pack, settle)

log = logging.getLogger("llmsim")
MAX_BATCH = 256        # calls in one transaction of the thread
MAINTAIN_EVERY = 200     # loop commits between two purges of expired rows + WAL checkpoints
READ, WRITE, CREATE, RAW = 0, 1, 2, 3   # CREATE: a write whose evictions may wait for the commit;
                                        # RAW: run outside any transaction (maintenance)
SQLITE_BUSY = 5
SQLITE_FULL = 13
WAL_SIZE_LIMIT = 16 << 20  # bytes the WAL file is cut back to when it starts over
BUSY_RETRY_S, BUSY_RETRIES = 0.001, 50   # another process's write burst: retry on the loop for ~50 ms


def is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == SQLITE_BUSY
    return "locked" in str(exc) or "busy" in str(exc)     # pragma: no cover - Python < 3.11


SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, expires REAL NOT NULL,
    status TEXT NOT NULL, events INTEGER NOT NULL, response BLOB NOT NULL, meta BLOB NOT NULL,
    frames BLOB NOT NULL DEFAULT x'');
CREATE TABLE IF NOT EXISTS chunks (
    response_n INTEGER NOT NULL REFERENCES responses (n) ON DELETE CASCADE,
    first_seq INTEGER NOT NULL, count INTEGER NOT NULL, frames BLOB NOT NULL,
    PRIMARY KEY (response_n, first_seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS conversations (
    n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, expires REAL NOT NULL, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    conversation_n INTEGER NOT NULL REFERENCES conversations (n) ON DELETE CASCADE,
    pos INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, item BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS items_by_conversation ON items (conversation_n, id);
CREATE TABLE IF NOT EXISTS outbox (key TEXT PRIMARY KEY, entry BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (key TEXT PRIMARY KEY, count INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chats (
    n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, expires REAL NOT NULL, record BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS responses_active ON responses (status) WHERE status IN ('queued', 'in_progress');
CREATE TABLE IF NOT EXISTS leases (owner TEXT PRIMARY KEY, expires REAL NOT NULL) WITHOUT ROWID;
"""


class Tx:
    """What a call runs with: the connection, the time, and evictions owed by creations."""
    __slots__ = ("db", "now", "max_entries", "owed")

    def __init__(self, db: sqlite3.Connection, max_entries: int):
        self.db, self.max_entries, self.owed = db, max_entries, {}
        self.now = 0.0

    def note_created(self, table: str, n: int) -> None:
        """Row `n` was added to `table`: rows beyond `max_entries` go (now or, for a run of
        creations, once after the last of them)."""
        self.owed[table] = max(n, self.owed.get(table, 0))

    def evict(self) -> None:
        for table, n in self.owed.items():
            self.db.execute(f"DELETE FROM {table} WHERE n <= ?", (n - self.max_entries,))
        self.owed.clear()


class Writer:
    """The thread running one store's calls, batch by batch. It holds no reference to the
    store: when the store is collected (or at exit) `stop()` flushes what is queued."""

    def __init__(self, path: str, max_entries: int, eviction: Eviction, max_bytes: int | None = None):
        self.path, self.max_entries, self.eviction = path, max_entries, eviction
        self.limit = limit_pragma(max_bytes)
        self.queue: collections.deque = collections.deque()
        self.wake = threading.Event()
        self.armed = False            # wake is set (or about to be) for what is queued
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.db: sqlite3.Connection | None = None
        self.lock = threading.Lock()  # starting / stopping the thread

    # ---- the caller's side (any thread; normally the event loop) -----------------------
    def submit(self, fn: Callable[[Tx], Any], kind: int, future: asyncio.Future | None) -> None:
        self.queue.append((fn, kind, future))
        if not self.armed:
            self.armed = True
            if self.thread is None:
                self._start()
            self.wake.set()

    def _start(self) -> None:
        with self.lock:
            if self.thread is None:
                self.stopping = False
                self.thread = threading.Thread(target=self._run, name="llmsim-store", daemon=True)
                self.thread.start()

    def stop(self) -> None:
        """Run what is queued, close the connection and end the thread (waits for it, unless
        called on the thread itself)."""
        with self.lock:
            thread = self.thread
            if thread is None:
                return
            self.stopping = True
            self.armed = True
            self.wake.set()
        if thread is not threading.current_thread():
            thread.join(30)

    # ---- the writer thread --------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                self.wake.wait()
                self.armed = False
                self.wake.clear()
                while self.queue:
                    if self.queue[0][1] == RAW:
                        self._raw(self.queue.popleft())
                        continue
                    batch = []
                    while self.queue and len(batch) < MAX_BATCH and self.queue[0][1] != RAW:
                        batch.append(self.queue.popleft())
                    self._execute(batch)
                    del batch       # the calls' closures (and what they hold) go now
                with self.lock:
                    if self.stopping and not self.queue:
                        self.thread = None
                        self._close()
                        return
        except BaseException:       # pragma: no cover - a bug: say so, and let the next call restart
            log.exception("store writer thread failed")
            with self.lock:
                self.thread = None
                self.armed = False
            raise

    def _connect(self) -> sqlite3.Connection:
        if self.db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(SCHEMA)
            if self.limit:
                db.execute(self.limit)
            if "frames" not in {row[1] for row in db.execute("PRAGMA table_info(responses)")}:
                db.execute("ALTER TABLE responses ADD COLUMN frames BLOB NOT NULL DEFAULT x''")  # older file
            self.db = db
        return self.db

    def _close(self) -> None:
        if self.db is not None:
            try:
                self.db.close()
            finally:
                self.db = None

    def _raw(self, call) -> None:
        fn, _, future = call
        try:
            tx = Tx(self._connect(), self.max_entries)
            tx.now = time.time()
            self._deliver([(future, fn(tx), True)])
        except Exception as exc:
            self._deliver([(future, exc, False)])

    def _execute(self, batch: list, evicted: int = 0) -> None:
        """One transaction for the batch; if a call raises, each call again in its own (a
        full file first evicts its oldest entries, `store_evict_when_full`, and runs it again)."""
        results: list = []
        try:
            tx = Tx(self._connect(), self.max_entries)
            tx.db.execute("BEGIN IMMEDIATE" if any(kind != READ for _, kind, _ in batch) else "BEGIN")
        except Exception as exc:     # cannot connect or lock (e.g. locked for 30 s): all fail
            self._deliver([(future, exc, False) for _, _, future in batch])
            return
        try:
            for fn, kind, future in batch:
                tx.now = time.time()
                if kind != CREATE:
                    tx.evict()
                results.append((future, fn(tx), True))
            tx.evict()
            tx.db.execute("COMMIT")
        except Exception as exc:
            if tx.db.in_transaction:
                tx.db.execute("ROLLBACK")
            if is_full(exc):
                freed = self.eviction.make_room(evicted, functools.partial(make_room, tx.db))
                if freed:                   # the oldest entries went: the batch again
                    self._execute(batch, evicted + freed)
                    return
            if len(batch) == 1:
                self._deliver([(batch[0][2], exc, False)])
            else:
                for call in batch:
                    self._execute([call])
            return
        self._deliver(results)

    @staticmethod
    def _deliver(outcomes: list) -> None:
        """Hand results to the loops that wait for them (one wake-up per loop); log the
        failures of calls nobody waits for."""
        by_loop: dict = {}
        for future, value, ok in outcomes:
            if future is None:
                if not ok:
                    log.error("store: a queued write failed", exc_info=value)
                continue
            by_loop.setdefault(future.get_loop(), []).append((future, value, ok))
        for loop, pairs in by_loop.items():
            try:
                loop.call_soon_threadsafe(settle, pairs)
            except RuntimeError:    # the loop is closed: nobody is waiting any more
                pass


def is_full(exc: Exception) -> bool:
    """SQLITE_FULL: the file reached `max_page_count` (store_max_bytes) or the disk is full."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF == SQLITE_FULL if code is not None else "full" in str(exc)


def make_room(db: sqlite3.Connection, count: int) -> int:
    """Evict the oldest `count` of each kind in a transaction of its own (a full file undoes
    the whole transaction of the write that found it full); how many rows went (0: none
    could, or the lock was taken)."""
    try:
        db.execute("BEGIN IMMEDIATE")
        gone = evict_oldest(db, count)
        db.execute("COMMIT")
    except sqlite3.OperationalError:
        if db.in_transaction:
            db.execute("ROLLBACK")
        return 0
    return gone


def evict_oldest(db: sqlite3.Connection, count: int) -> int:
    """Delete the oldest `count` responses (not those still running), conversations and chats
    (what hangs off them goes too: foreign keys); how many rows went."""
    gone = 0
    for table, keep in (("responses", " WHERE status NOT IN (?, ?)"), ("conversations", ""), ("chats", "")):
        gone += db.execute(f"DELETE FROM {table} WHERE n IN (SELECT n FROM {table}{keep} ORDER BY n LIMIT ?)",
                           (*ACTIVE, count) if keep else (count,)).rowcount
    return gone


def limit_pragma(max_bytes: int | None) -> str | None:
    """The pragma that keeps a connection's writes within `max_bytes` (4 KiB pages)."""
    return None if max_bytes is None else f"PRAGMA max_page_count={max(16, max_bytes // 4096)}"


def outage(exc: Exception) -> str | None:
    if isinstance(exc, sqlite3.OperationalError) and "full" in str(exc):
        return f"The state store is full (SQLite: {exc}). Please try again later."
    return None


@outages_answered(outage)
class SqliteStore:
    needs_task = False  # waits only on futures (a thread's, the loop's)

    def __init__(self, path: str, bounds: Bounds, max_bytes: int | None = None):
        self.path = path
        self.bounds = bounds
        self.limit = limit_pragma(max_bytes)
        if path != ":memory:":
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"store: cannot create the directory of {path!r}: {exc}") from None
        self._db: sqlite3.Connection | None = None   # the event loop's
        self._step = StepBatch(self._apply_queued)   # writes of this loop step: (fn, kind, future)
        self._busy = 0                               # tries that found the database locked
        self._retry_armed = False
        self._on_thread = 0      # calls sent to the thread and not done: later calls follow them
        self._commits = 0
        self.eviction = Eviction(bounds.evict_when_full, path)     # (the thread's and the loop's)
        self._writer = Writer(path, bounds.max_entries, self.eviction, max_bytes)
        weakref.finalize(self, self._writer.stop)    # end the thread at exit or when dropped
        self.capabilities = Capabilities(leases=self, attempts=self)

    # ---- plumbing --------------------------------------------------------------------
    def _loop_db(self) -> sqlite3.Connection | None:
        """The loop's connection (None until the thread has created the schema of a file)."""
        if self._db is None:
            if self.path == ":memory:":      # one connection holds the whole database
                db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                db.execute("PRAGMA foreign_keys=ON")
                db.executescript(SCHEMA)
            elif self._writer.db is None:
                return None
            else:
                db = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("PRAGMA foreign_keys=ON")
                # the thread's checkpoints keep the WAL short; when the thread lags (starved of
                # the GIL under load), a commit that finds the WAL past the limit checkpoints it
                db.execute(f"PRAGMA wal_autocheckpoint={WAL_SIZE_LIMIT // 4096}")
                db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")   # the WAL restarts here
            if self.limit:
                db.execute(self.limit)
            self._db = db
        return self._db

    async def _call(self, fn: Callable[[Tx], Any], kind: int) -> Any:
        """`fn(tx)` after every call made before it; a write returns once committed.

        Writes made during one step of the loop are queued and applied together when it ends:
        BEGIN IMMEDIATE, each call under its own savepoint, COMMIT. The database's write lock
        is held only for that burst, so other processes sharing the file rarely wait for it.
        A read first applies what is queued (a caller reads what it has written)."""
        if not self._on_thread:
            db = self._loop_db()
            if db is not None:
                if kind == READ:
                    if self._step.queued:
                        self._apply_queued()
                    if self._step.queued:       # another process holds the lock: wait for them
                        await asyncio.wait([self._step.queued[-1][2]])
                    if not self._on_thread:
                        try:
                            return self._read(db, fn)
                        except sqlite3.OperationalError as exc:
                            if not is_busy(exc) or self.path == ":memory:":
                                raise
                else:
                    return await asyncio.shield(self._step.add(fn, kind))
        return await self._on_writer(fn, kind)

    def _read(self, db: sqlite3.Connection, fn: Callable[[Tx], Any]) -> Any:
        """One read transaction (several SELECTs agree)."""
        tx = Tx(db, self.bounds.max_entries)
        tx.now = time.time()
        db.execute("BEGIN")
        try:
            return fn(tx)
        finally:
            db.execute("COMMIT")

    def _make_room(self, exc: Exception, evicted: int) -> int:
        """After a write found the file full: the next round of `Eviction`; how many entries went."""
        if not is_full(exc):
            return 0
        return self.eviction.make_room(evicted, functools.partial(make_room, self._db))

    def _apply_queued(self, evicted: int = 0) -> None:
        """Apply the queued writes in one short transaction; when another process holds the
        lock, hand them (in order) to the thread, which waits for it. A full file evicts its
        oldest entries (`store_evict_when_full`) and the writes run again."""
        queued = self._step.take()
        if not queued:
            return
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")       # raises at once if another process writes
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or self.path == ":memory:":
                settle([(future, exc, False) for _, _, future in queued])
                return
            self._busy += 1
            if self._busy <= BUSY_RETRIES:      # its bursts are short: try again in a moment
                self._step.queued[:0] = queued
                if not self._retry_armed:
                    self._retry_armed = True
                    asyncio.get_running_loop().call_later(BUSY_RETRY_S, self._retry)
                return
            self._busy = 0                      # held for long (e.g. a checkpoint): the thread waits
            for fn, kind, future in queued:
                self._on_thread += 1
                future.add_done_callback(self._thread_call_done)
                self._writer.submit(fn, kind, future)
            return
        self._busy = 0
        tx = Tx(db, self.bounds.max_entries)
        outcomes = []
        for fn, kind, future in queued:
            tx.now = time.time()
            if kind != CREATE:
                tx.evict()
            db.execute("SAVEPOINT call")        # a failing call undoes only itself
            try:
                outcomes.append((future, fn(tx), True))
            except Exception as exc:
                if not db.in_transaction:       # SQLite undid the whole transaction (the file is full):
                    freed = self._make_room(exc, evicted)
                    if freed:                   # the oldest entries went: all of them again
                        self._step.queued[:0] = queued
                        self._apply_queued(evicted + freed)
                        return
                    settle([(future, exc, False) for _, _, future in queued])  # every call failed
                    return
                db.execute("ROLLBACK TO call")
                outcomes.append((future, exc, False))
            db.execute("RELEASE call")
        try:
            tx.evict()
            db.execute("COMMIT")
        except Exception as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            settle([(future, exc, False) for _, _, future in queued])
            return
        settle(outcomes)
        self._commits += 1
        if self._commits % MAINTAIN_EVERY == 0:
            if self.path == ":memory:":
                _maintain(Tx(db, self.bounds.max_entries))
            else:
                self._writer.submit(_maintain, RAW, None)

    def _retry(self) -> None:
        self._retry_armed = False
        self._apply_queued()

    async def _on_writer(self, fn: Callable[[Tx], Any], kind: int) -> Any:
        """`fn(tx)` on the thread; until it has run there (even if its caller is cancelled),
        later calls go there too."""
        self._on_thread += 1
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(self._thread_call_done)
        self._writer.submit(fn, kind, future)
        return await asyncio.shield(future)

    def _thread_call_done(self, _future) -> None:
        self._on_thread -= 1

    async def _run(self, fn: Callable[[Tx], Any]) -> Any:
        return await self._call(fn, READ)

    async def _write(self, fn: Callable[[Tx], Any]) -> Any:
        return await self._call(fn, WRITE)

    async def flush(self) -> None:
        """Wait until every call made so far is done (and committed)."""
        if self._step.queued:
            self._apply_queued()
        if self._on_thread:
            await self._on_writer(lambda tx: None, READ)

    # ---- responses -------------------------------------------------------------------
    async def put_response(self, record: StoredResponse, frames: Sequence[bytes] = ()) -> None:
        """Queued: returns at once (every later call of this store sees it)."""
        row = (record.id, record.status, len(frames), record.response_json(), record.meta_json())
        blob = pack(frames)
        expires = self.bounds.expires

        def put(tx: Tx):
            db = tx.db
            db.execute("DELETE FROM responses WHERE id = ?", (row[0],))
            n = db.execute("INSERT INTO responses (id, expires, status, events, response, meta, frames) "
                           "VALUES (?,?,?,?,?,?,?)", (row[0], expires(tx.now), *row[1:], blob)).lastrowid
            tx.note_created("responses", n)
        await self._call(put, CREATE)

    async def get_response(self, response_id: str) -> StoredResponse | None:
        def get(tx: Tx):
            row = tx.db.execute("SELECT response, meta, events FROM responses WHERE id = ? AND expires > ?",
                                (response_id, tx.now)).fetchone()
            return row and StoredResponse.from_json(response_id, *row)
        return await self._run(get) or None

    async def active_responses(self) -> list[str]:
        """The ids of the live responses still queued or in progress."""
        def ids(tx: Tx):       # (the statuses as literals: what the partial index responses_active covers)
            return [row[0] for row in tx.db.execute(
                "SELECT id FROM responses WHERE status IN ('queued', 'in_progress') AND expires > ?", (tx.now,))]
        return await self._run(ids)

    async def renew_lease(self, owner: str, lease_s: float) -> None:
        """The process `owner` runs its background responses for `lease_s` seconds more
        (leases run out an hour ago are deleted)."""
        def renew(tx: Tx):
            tx.db.execute("DELETE FROM leases WHERE expires < ?", (tx.now - 3600,))
            tx.db.execute("INSERT OR REPLACE INTO leases (owner, expires) VALUES (?, ?)", (owner, tx.now + lease_s))
        await self._write(renew)

    async def live_owners(self, owners: Sequence[str]) -> set[str]:
        """Those of `owners` whose lease has not run out."""
        def read(tx: Tx):
            return {owner for owner in owners if tx.db.execute(
                "SELECT 1 FROM leases WHERE owner = ? AND expires > ?", (owner, tx.now)).fetchone()}
        return await self._run(read)

    async def delete_response(self, response_id: str) -> bool:
        def delete(tx: Tx):
            return tx.db.execute("DELETE FROM responses WHERE id = ? AND expires > ?",
                                 (response_id, tx.now)).rowcount > 0
        return await self._write(delete)

    async def append_events(self, response_id: str, frames: Sequence[bytes],
                            snapshot: dict | None = None, *, expect_events: int | None = None) -> bool:
        blob = pack(frames)
        status, response = (snapshot.get("status"), dumps(snapshot)) if snapshot is not None else (None, None)

        def append(tx: Tx):
            db, now = tx.db, tx.now
            row = db.execute("SELECT n, status, events FROM responses WHERE id = ? AND expires > ?",
                             (response_id, now)).fetchone()
            if row is None or row[1] not in ACTIVE or (expect_events is not None and row[2] != expect_events):
                return False
            n, _, count = row
            if blob:
                db.execute("INSERT INTO chunks (response_n, first_seq, count, frames) VALUES (?,?,?,?)",
                           (n, count, len(frames), blob))
            if response is None:
                db.execute("UPDATE responses SET events = ?, expires = ? WHERE n = ?",
                           (count + len(frames), self.bounds.expires(now), n))
            else:
                db.execute("UPDATE responses SET events = ?, expires = ?, status = ?, response = ? WHERE n = ?",
                           (count + len(frames), self.bounds.expires(now), status, response, n))
            return True
        return await self._write(append)

    async def events(self, response_id: str, after: int) -> tuple[list[bytes], str | None]:
        def read(tx: Tx):
            db = tx.db
            row = db.execute("SELECT n, status, frames FROM responses WHERE id = ? AND expires > ?",
                             (response_id, tx.now)).fetchone()
            if row is None:
                return [], None
            rows = db.execute("SELECT first_seq, frames FROM chunks WHERE response_n = ? "
                              "AND first_seq + count - 1 > ? ORDER BY first_seq", (row[0], after))
            frames = []
            for first_seq, blob in [(0, row[2]), *rows] if row[2] else rows:
                frames += frames_after(blob, first_seq, after)
            return frames, row[1]
        return await self._run(read)

    # ---- conversations ---------------------------------------------------------------
    async def put_conversation(self, conversation: Conversation) -> None:
        record = conversation.to_json()

        def put(tx: Tx):
            db, now = tx.db, tx.now
            updated = db.execute("UPDATE conversations SET record = ?, expires = ? WHERE id = ? AND expires > ?",
                                 (record, self.bounds.expires(now), conversation.id, now))
            if updated.rowcount:
                return
            n = db.execute("INSERT INTO conversations (id, expires, record) VALUES (?,?,?)",
                           (conversation.id, self.bounds.expires(now), record)).lastrowid
            tx.note_created("conversations", n)
        await self._call(put, CREATE)

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        def get(tx: Tx):
            row = tx.db.execute("SELECT record FROM conversations WHERE id = ? AND expires > ?",
                                (conversation_id, tx.now)).fetchone()
            return row and Conversation.from_json(conversation_id, row[0])
        return await self._run(get) or None

    async def delete_conversation(self, conversation_id: str) -> bool:
        def delete(tx: Tx):
            return tx.db.execute("DELETE FROM conversations WHERE id = ? AND expires > ?",
                                 (conversation_id, tx.now)).rowcount > 0
        return await self._write(delete)

    @staticmethod
    def _conversation_n(tx: Tx, conversation_id: str) -> int | None:
        row = tx.db.execute("SELECT n FROM conversations WHERE id = ? AND expires > ?",
                            (conversation_id, tx.now)).fetchone()
        return row[0] if row else None

    async def add_items(self, conversation_id: str, items: Sequence[dict]) -> bool:
        rows = [(item.get("id"), dumps(item)) for item in items]

        def add(tx: Tx):
            n = self._conversation_n(tx, conversation_id)
            if n is None:
                return False
            tx.db.executemany("INSERT INTO items (conversation_n, id, item) VALUES (?,?,?)",
                              [(n, item_id, item) for item_id, item in rows])
            tx.db.execute("UPDATE conversations SET expires = ? WHERE n = ?", (self.bounds.expires(tx.now), n))
            return True
        return await self._write(add)

    async def conversation_items(self, conversation_id: str) -> list[dict] | None:
        def read(tx: Tx):
            n = self._conversation_n(tx, conversation_id)
            if n is None:
                return None
            rows = tx.db.execute("SELECT item FROM items WHERE conversation_n = ? ORDER BY pos", (n,))
            return [orjson.loads(r[0]) for r in rows]
        return await self._run(read)

    async def get_item(self, conversation_id: str, item_id: str) -> dict | None:
        def get(tx: Tx):
            row = tx.db.execute("SELECT i.item FROM items i JOIN conversations c ON c.n = i.conversation_n "
                                "WHERE c.id = ? AND c.expires > ? AND i.id = ? ORDER BY i.pos LIMIT 1",
                                (conversation_id, tx.now, item_id)).fetchone()
            return row and orjson.loads(row[0])
        return await self._run(get) or None

    async def delete_item(self, conversation_id: str, item_id: str) -> bool:
        def delete(tx: Tx):
            n = self._conversation_n(tx, conversation_id)
            return n is not None and tx.db.execute("DELETE FROM items WHERE conversation_n = ? AND id = ?",
                                                   (n, item_id)).rowcount > 0
        return await self._write(delete)

    # ---- scenario error turns ----------------------------------------------------------
    async def attempt(self, key: str) -> int:
        """How many requests (this one included) reached a scenario's error turn with this
        history (llmsim.faults.scripted), counted for every process sharing the file."""
        return await self._write(lambda tx: tx.db.execute(
            "INSERT INTO attempts (key, count) VALUES (?, 1) ON CONFLICT (key) DO UPDATE "
            "SET count = count + 1 RETURNING count", (key,)).fetchone()[0])

    # ---- stored chat completions -----------------------------------------------------
    async def put_chat(self, chat_id: str, record: bytes) -> None:
        def put(tx: Tx):
            db, now = tx.db, tx.now
            updated = db.execute("UPDATE chats SET record = ?, expires = ? WHERE id = ? AND expires > ?",
                                 (record, self.bounds.expires(now), chat_id, now))
            if updated.rowcount:
                return
            db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))         # expired
            n = db.execute("INSERT INTO chats (id, expires, record) VALUES (?,?,?)",
                           (chat_id, self.bounds.expires(now), record)).lastrowid
            tx.note_created("chats", n)
        await self._call(put, CREATE)

    async def get_chat(self, chat_id: str) -> bytes | None:
        def get(tx: Tx):
            row = tx.db.execute("SELECT record FROM chats WHERE id = ? AND expires > ?", (chat_id, tx.now)).fetchone()
            return row and bytes(row[0])
        return await self._run(get) or None

    async def delete_chat(self, chat_id: str) -> bool:
        def delete(tx: Tx):
            return tx.db.execute("DELETE FROM chats WHERE id = ? AND expires > ?", (chat_id, tx.now)).rowcount > 0
        return await self._write(delete)

    async def chats(self) -> list[bytes]:
        def read(tx: Tx):
            return [bytes(row[0]) for row in
                    tx.db.execute("SELECT record FROM chats WHERE expires > ? ORDER BY n", (tx.now,))]
        return await self._run(read)

    # ---- pending webhook deliveries -----------------------------------------------------
    async def outbox_put(self, key: str, entry: bytes) -> None:
        await self._write(lambda tx: tx.db.execute("INSERT OR REPLACE INTO outbox (key, entry) VALUES (?,?)",
                                                   (key, entry)) and None)

    async def outbox_delete(self, key: str) -> None:
        await self._write(lambda tx: tx.db.execute("DELETE FROM outbox WHERE key = ?", (key,)) and None)

    async def outbox(self) -> list[bytes]:
        return await self._run(lambda tx: [row[0] for row in tx.db.execute("SELECT entry FROM outbox")])

    async def close(self) -> None:
        """Finish every call, then close the connections (a later call opens them again)."""
        await self.flush()
        if self._db is not None and self.path != ":memory:":
            self._db.close()
            self._db = None
        await asyncio.get_running_loop().run_in_executor(None, self._writer.stop)


def _maintain(tx: Tx) -> None:
    """Delete expired rows (they already read as missing) and checkpoint the WAL.

    RESTART, not PASSIVE: it holds the write lock while it copies (writers retry meanwhile),
    so it finishes, and the next write starts the WAL file over. Under steady writes a
    PASSIVE checkpoint never catches up with the end of the WAL, which then grows without
    bound, and every commit gets slower."""
    now = time.time()
    for table in ("responses", "conversations", "chats"):
        tx.db.execute(f"DELETE FROM {table} WHERE expires <= ?", (now,))
    tx.db.execute("PRAGMA wal_checkpoint(RESTART)")
