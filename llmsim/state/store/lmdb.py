"""The embedded store of `llmsim serve --workers`: one LMDB environment (`--store lmdb:DIR`)
that every worker maps and writes under LMDB's own cross-process write lock.

Invariants: writes never sync to disk and run on the event loop; the writes of one loop step
share one transaction (`StepBatch`), committed before any read, so a write is readable by
every process when its call returns; the map grows only as far as the disk has room (a full
disk is a full map, never a SIGBUS); a full map evicts by `Eviction`, else 503. Capabilities:
leases, attempts, prefix_table. Tables and layout: docs/internals.md#statestorelmdb.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import struct
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import lmdb
import orjson

from llmsim.errors import ConfigError
from llmsim.render.jsonbytes import dumps
from llmsim.state.store.capabilities import Capabilities
from llmsim.state.store.base import (ACTIVE, Bounds, Conversation, Eviction, StepBatch,
                                     StoredResponse, frames_after, outages_answered, pack, settle)

log = logging.getLogger("llmsim")
MAP_SIZE = 64 << 20          # the map (and its file's disk blocks) to start with; it doubles when full
PAGE = 4096                  # map sizes are whole pages
SWEEP_EVERY = 256
FORMAT = b"2"
RESPONSE = struct.Struct("<dQIIBII")    # expires, n, events, first, len(status), len(response), len(frames)
HEAD = struct.Struct("<dQII")            # RESPONSE's first fields
CONVERSATION = struct.Struct("<dQQ")    # expires, n, next item position
CHAT = struct.Struct("<dQ")             # expires, n
POSITION = struct.Struct(">Q")
SEQ = struct.Struct(">I")
COUNT = struct.Struct("<I")
KINDS = {"responses": b"r", "conversations": b"c", "chats": b"h"}


def _order_key(kind: str, n: int) -> bytes:
    return KINDS[kind] + POSITION.pack(n)


def _key(*parts: str | bytes) -> bytes:
    return b"\0".join(p.encode() if isinstance(p, str) else p for p in parts)


class Row(NamedTuple):
    """A `responses` value: `first` of its `events` frames are `frames` (packed); the rest are
    rows of the `frames` table."""
    expires: float
    n: int
    events: int
    status: str
    response: bytes
    meta: bytes
    first: int = 0
    frames: bytes = b""

    def value(self) -> bytes:
        status = self.status.encode()
        return RESPONSE.pack(self.expires, self.n, self.events, self.first, len(status), len(self.response),
                             len(self.frames)) + status + self.response + self.frames + self.meta

    @classmethod
    def parse(cls, value: bytes) -> "Row":
        expires, n, events, first, status_len, response_len, frames_len = RESPONSE.unpack_from(value)
        at = RESPONSE.size + status_len
        end = at + response_len
        return cls(expires, n, events, value[RESPONSE.size:at].decode(), value[at:end],
                   value[end + frames_len:], first, value[end:end + frames_len])


def outage(exc: Exception) -> str | None:
    if isinstance(exc, (lmdb.MapFullError, lmdb.DiskError)):
        return "The state store is full (LMDB: its map or its disk). Please try again later."
    return None


@outages_answered(outage)
class LmdbStore:
    needs_task = False  # waits only on futures (a thread's, the loop's)

    def __init__(self, path: str, bounds: Bounds, max_bytes: int | None = None):
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"store: cannot create the LMDB directory {path!r}: {exc}") from None
        self.path = path
        self.bounds = bounds
        self.max_bytes = max_bytes      # the map never grows past it: a write that does not fit fails
        self._env: lmdb.Environment | None = None
        self._writes = 0
        self.eviction = Eviction(bounds.evict_when_full, path)
        self._step = StepBatch(self._commit)    # writes of this loop step: (body, future)
        self._open()             # a directory it cannot use fails start-up, not the first request
        self.capabilities = Capabilities(leases=self, attempts=self, prefix_table=LmdbPrefixTable(self))

    # ---- plumbing --------------------------------------------------------------------
    def _open(self) -> lmdb.Environment:
        if self._env is None:
            self._env, self.db = _open_env(self.path, self.max_bytes)
        return self._env

    def _transact(self, body: Callable, write: bool = False) -> Any:
        """`body(txn)` in one transaction now (committed when it returns, for a write). The map
        starts small and doubles when a write fills it; another process's growth is adopted."""
        env = self._open()
        evicted = 0
        while True:
            try:
                with env.begin(write=write) as txn:
                    result = body(txn)
                break
            except lmdb.MapFullError:
                size = env.info()["map_size"]
                want = size * 2 if self.max_bytes is None else min(size * 2, self.max_bytes)
                if want > size and (grown := reserve(env, want)) > size:      # the disk has room
                    env.set_mapsize(grown)
                    continue
                freed = self.eviction.make_room(evicted, self._evict_oldest) if write else 0
                if not freed:
                    raise
                evicted += freed
            except lmdb.MapResizedError:
                env.set_mapsize(0)
        return result

    def _write(self, body: Callable) -> asyncio.Future:
        """`body(txn)` in the write transaction of this loop step; the future is its result."""
        return self._step.add(body)

    def _commit(self) -> None:
        """Run the waiting writes in one transaction. If one raises, the transaction is
        dropped and each runs in its own, so only its caller gets the error."""
        batch = self._step.take()
        if not batch:
            return
        try:
            outcomes = [(future, result, True) for (_, future), result in
                        zip(batch, self._transact(lambda txn: [body(txn) for body, _ in batch], write=True))]
        except Exception:
            outcomes = [(future, *self._alone(body)) for body, future in batch]
        settle(outcomes)
        before, self._writes = self._writes, self._writes + len(batch)
        if before // SWEEP_EVERY != self._writes // SWEEP_EVERY:
            self._transact(self._sweep, write=True)

    def _evict_oldest(self, count: int) -> int:
        """Delete the oldest `count` entries of each kind (responses still running stay), one
        per transaction (a full map has little room for the pages even a delete copies); how
        many went. A write that found the map full tries again after each round."""
        gone = 0
        for kind in KINDS:
            for _ in range(count):
                try:
                    with self._env.begin(write=True) as txn:
                        dropped = self._drop_oldest(txn, kind)
                except lmdb.MapFullError:
                    return gone
                if not dropped:
                    break
                gone += 1
        return gone

    def _drop_oldest(self, txn, kind: str) -> bool:
        """Delete the oldest entry of `kind` (a response: the oldest not running); whether one went."""
        prefix = KINDS[kind]
        cursor = txn.cursor(db=self.db["order"])
        found = cursor.set_range(prefix)
        while found and cursor.key().startswith(prefix):
            entry_id = cursor.value().decode()
            if kind != "responses" or (row := self._live_response(txn, entry_id)) is None \
                    or row.status not in ACTIVE:
                self._drop(txn, kind, entry_id, order_key=bytes(cursor.key()))
                return True
            found = cursor.next()
        return False

    def _alone(self, body: Callable) -> tuple[Any, bool]:
        try:
            return self._transact(body, write=True), True
        except Exception as exc:
            return exc, False

    def _read(self, body: Callable) -> Any:
        """`body(txn)` in a read transaction that sees every write called before it."""
        if self._step.queued:
            self._commit()
        return self._transact(body)

    def _rows(self, txn, table: str, entry_id: str) -> list[tuple[bytes, bytes]]:
        """(key after the id, value) of `table`'s rows under an entry, in key order."""
        prefix = _key(entry_id, b"")
        rows = []
        cursor = txn.cursor(db=self.db[table])
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not key.startswith(prefix):
                    break
                rows.append((key[len(prefix):], value))
        return rows

    def _next_n(self, txn, kind: str) -> int:
        """One more than the newest entry's creation number (1 when there is none)."""
        prefix = KINDS[kind]
        cursor = txn.cursor(db=self.db["order"])
        found = cursor.prev() if cursor.set_range(bytes([prefix[0] + 1])) else cursor.last()
        return POSITION.unpack(cursor.key()[1:])[0] + 1 if found and cursor.key().startswith(prefix) else 1

    def _add_newest(self, txn, kind: str, n: int, entry_id: str) -> None:
        """Record creation `n` and evict what falls beyond `max_entries`."""
        order = self.db["order"]
        prefix = KINDS[kind]
        txn.put(prefix + POSITION.pack(n), entry_id.encode(), db=order)
        limit = n - self.bounds.max_entries
        if limit > 0:
            cursor = txn.cursor(db=order)
            cursor.set_range(prefix)
            while (key := cursor.key()).startswith(prefix) and POSITION.unpack(key[1:])[0] <= limit:
                old = cursor.value().decode()
                cursor.delete()                    # moves on to the next row
                self._drop(txn, kind, old, order_key=None)

    def _drop(self, txn, kind: str, entry_id: str, order_key: bytes | None) -> bool:
        """Delete an entry and what hangs off it (its order row, with `order_key`)."""
        if order_key is not None:
            txn.delete(order_key, db=self.db["order"])
        if kind == "responses":
            value = txn.pop(entry_id.encode(), db=self.db["responses"])
            if value is None:
                return False
            txn.delete(entry_id.encode(), db=self.db["active"])
            _, _, events, first = HEAD.unpack_from(value)
            if events > first:
                self._delete_prefix(txn, "frames", _key(entry_id, b""))      # appended frames
            return True
        if kind == "chats":
            return txn.delete(entry_id.encode(), db=self.db["chats"])
        found = txn.delete(entry_id.encode(), db=self.db["conversations"])
        self._delete_prefix(txn, "items", _key(entry_id, b""))
        self._delete_prefix(txn, "item_ids", _key(entry_id, b""))
        return found

    def _delete_prefix(self, txn, table: str, prefix: bytes) -> None:
        cursor = txn.cursor(db=self.db[table])
        if cursor.set_range(prefix):
            while cursor.key().startswith(prefix):
                if not cursor.delete():
                    break

    def _sweep(self, txn) -> None:
        """Delete expired entries among the oldest `SWEEP_EVERY` of each kind."""
        now = time.time()
        for kind, prefix in KINDS.items():
            cursor = txn.cursor(db=self.db["order"])
            expired = []
            if cursor.set_range(prefix):
                for looked, (key, value) in enumerate(cursor):
                    if not key.startswith(prefix) or looked >= SWEEP_EVERY:
                        break
                    raw = txn.get(value, db=self.db[kind])
                    if raw is None or struct.unpack_from("<d", raw)[0] <= now:
                        expired.append((key, value.decode()))
            for key, entry_id in expired:
                self._drop(txn, kind, entry_id, order_key=key)

    def _live_response(self, txn, response_id: str):
        raw = txn.get(response_id.encode(), db=self.db["responses"])
        if raw is None:
            return None
        row = Row.parse(raw)
        return row if row.expires > time.time() else None

    def _live_conversation(self, txn, conversation_id: str):
        raw = txn.get(conversation_id.encode(), db=self.db["conversations"])
        if raw is None:
            return None
        expires, n, next_pos = CONVERSATION.unpack_from(raw)
        return (expires, n, next_pos, raw[CONVERSATION.size:]) if expires > time.time() else None

    def _live_chat(self, txn, chat_id: str):
        raw = txn.get(chat_id.encode(), db=self.db["chats"])
        if raw is None:
            return None
        expires, n = CHAT.unpack_from(raw)
        return (expires, n, bytes(raw[CHAT.size:])) if expires > time.time() else None

    def _delete(self, kind: str, entry_id: str) -> asyncio.Future:
        """Delete an entry that has not expired (and what hangs off it); whether there was one."""
        live = {"responses": self._live_response, "conversations": self._live_conversation,
                "chats": self._live_chat}[kind]

        def delete(txn) -> bool:
            found = live(txn, entry_id)       # (expires, n, ...)
            if found is not None:
                self._drop(txn, kind, entry_id, _order_key(kind, found[1]))
            return found is not None
        return self._write(delete)

    # ---- responses -------------------------------------------------------------------
    async def put_response(self, record: StoredResponse, frames: Sequence[bytes] = ()) -> None:
        key = record.id.encode()
        row = Row(0.0, 0, len(frames), record.status, record.response_json(), record.meta_json(),
                  len(frames), pack(frames))

        def put(txn) -> None:
            responses = self.db["responses"]
            n = self._next_n(txn, "responses")
            value = row._replace(expires=self.bounds.expires(time.time()), n=n).value()
            if not txn.put(key, value, overwrite=False, db=responses):      # replacing one
                old = RESPONSE.unpack_from(txn.get(key, db=responses))[1]
                self._drop(txn, "responses", record.id, _order_key("responses", old))
                txn.put(key, value, db=responses)
            if row.status in ACTIVE:
                txn.put(key, b"", db=self.db["active"])
            self._add_newest(txn, "responses", n, record.id)
        await self._write(put)

    async def get_response(self, response_id: str) -> StoredResponse | None:
        row = self._read(lambda txn: self._live_response(txn, response_id))
        if row is None:
            return None
        return StoredResponse.from_json(response_id, row.response, row.meta, row.events, row.status)

    async def active_responses(self) -> list[str]:
        """The ids of the live responses still queued or in progress."""
        def ids(txn) -> list[str]:
            return [key.decode() for key in txn.cursor(db=self.db["active"]).iternext(values=False)
                    if (row := self._live_response(txn, key.decode())) is not None and row.status in ACTIVE]
        return self._read(ids)

    async def renew_lease(self, owner: str, lease_s: float) -> None:
        """The process `owner` runs its background responses for `lease_s` seconds more
        (leases run out an hour ago are deleted)."""
        prefix = b"lease\0"

        def renew(txn) -> None:
            now, meta = time.time(), self.db["meta"]
            stale = [key for key, value in self._rows(txn, "meta", "lease")
                     if struct.unpack("<d", value)[0] < now - 3600]
            for key in stale:
                txn.delete(prefix + key, db=meta)
            txn.put(prefix + owner.encode(), struct.pack("<d", now + lease_s), db=meta)
        await self._write(renew)

    async def live_owners(self, owners: Sequence[str]) -> set[str]:
        """Those of `owners` whose lease has not run out."""
        def read(txn) -> set[str]:
            now, meta = time.time(), self.db["meta"]
            return {owner for owner in owners
                    if (raw := txn.get(b"lease\0" + owner.encode(), db=meta)) is not None
                    and struct.unpack("<d", raw)[0] > now}
        return self._read(read)

    async def delete_response(self, response_id: str) -> bool:
        return await self._delete("responses", response_id)

    async def append_events(self, response_id: str, frames: Sequence[bytes],
                            snapshot: dict | None = None, *, expect_events: int | None = None) -> bool:
        blob = pack(frames)
        new_response = dumps(snapshot) if snapshot is not None else None

        def append(txn) -> bool:
            row = self._live_response(txn, response_id)
            if row is None:
                return False
            if row.status not in ACTIVE or (expect_events is not None and row.events != expect_events):
                return False
            if blob:
                txn.put(_key(response_id, SEQ.pack(row.events)), COUNT.pack(len(frames)) + blob,
                        db=self.db["frames"])
            if new_response is not None:
                row = row._replace(status=snapshot.get("status"), response=new_response)
                if row.status not in ACTIVE:
                    txn.delete(response_id.encode(), db=self.db["active"])
            row = row._replace(expires=self.bounds.expires(time.time()), events=row.events + len(frames))
            txn.put(response_id.encode(), row.value(), db=self.db["responses"])
            return True
        return await self._write(append)

    async def events(self, response_id: str, after: int) -> tuple[list[bytes], str | None]:
        def read(txn):
            row = self._live_response(txn, response_id)
            return None if row is None else (row, self._rows(txn, "frames", response_id))
        found = self._read(read)
        if found is None:
            return [], None
        row, rows = found
        frames = frames_after(row.frames, 0, after) if row.first - 1 > after else []
        for key, value in rows:
            first_seq, count = SEQ.unpack(key)[0], COUNT.unpack_from(value)[0]
            if first_seq + count - 1 > after:
                frames += frames_after(value[COUNT.size:], first_seq, after)
        return frames, row.status

    # ---- conversations ---------------------------------------------------------------
    async def put_conversation(self, conversation: Conversation) -> None:
        record, key = conversation.to_json(), conversation.id.encode()

        def put(txn) -> None:
            expires = self.bounds.expires(time.time())
            live = self._live_conversation(txn, conversation.id)
            if live is not None:
                _, n, next_pos, _ = live
                txn.put(key, CONVERSATION.pack(expires, n, next_pos) + record, db=self.db["conversations"])
                return
            old = txn.get(key, db=self.db["conversations"])
            if old is not None:     # expired: it goes, items and all
                self._drop(txn, "conversations", conversation.id,
                           _order_key("conversations", CONVERSATION.unpack_from(old)[1]))
            n = self._next_n(txn, "conversations")
            txn.put(key, CONVERSATION.pack(expires, n, 0) + record, db=self.db["conversations"])
            self._add_newest(txn, "conversations", n, conversation.id)
        await self._write(put)

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        live = self._read(lambda txn: self._live_conversation(txn, conversation_id))
        return None if live is None else Conversation.from_json(conversation_id, live[3])

    async def delete_conversation(self, conversation_id: str) -> bool:
        return await self._delete("conversations", conversation_id)

    async def add_items(self, conversation_id: str, items: Sequence[dict]) -> bool:
        rows = [(item.get("id"), dumps(item)) for item in items]

        def add(txn) -> bool:
            live = self._live_conversation(txn, conversation_id)
            if live is None:
                return False
            _, n, position, record = live
            for item_id, raw in rows:
                txn.put(_key(conversation_id, POSITION.pack(position)), raw, db=self.db["items"])
                if item_id is not None:
                    txn.put(_key(conversation_id, item_id), POSITION.pack(position), db=self.db["item_ids"])
                position += 1
            txn.put(conversation_id.encode(), CONVERSATION.pack(self.bounds.expires(time.time()), n, position)
                    + record, db=self.db["conversations"])
            return True
        return await self._write(add)

    async def conversation_items(self, conversation_id: str) -> list[dict] | None:
        def read(txn):
            if self._live_conversation(txn, conversation_id) is None:
                return None
            return self._rows(txn, "items", conversation_id)
        rows = self._read(read)
        return None if rows is None else [orjson.loads(value) for _, value in rows]

    async def get_item(self, conversation_id: str, item_id: str) -> dict | None:
        def read(txn):
            if self._live_conversation(txn, conversation_id) is None:
                return None
            position = txn.get(_key(conversation_id, item_id), db=self.db["item_ids"])
            return None if position is None else txn.get(_key(conversation_id, position), db=self.db["items"])
        raw = self._read(read)
        return None if raw is None else orjson.loads(raw)

    async def delete_item(self, conversation_id: str, item_id: str) -> bool:
        def delete(txn) -> bool:
            if self._live_conversation(txn, conversation_id) is None:
                return False
            position = txn.pop(_key(conversation_id, item_id), db=self.db["item_ids"])
            if position is not None:
                txn.delete(_key(conversation_id, position), db=self.db["items"])
            return position is not None
        return await self._write(delete)

    # ---- stored chat completions -----------------------------------------------------
    async def put_chat(self, chat_id: str, record: bytes) -> None:
        key = chat_id.encode()

        def put(txn) -> None:
            chats, expires = self.db["chats"], self.bounds.expires(time.time())
            live = self._live_chat(txn, chat_id)
            if live is not None:               # a new record; its place stays
                txn.put(key, CHAT.pack(expires, live[1]) + record, db=chats)
                return
            old = txn.get(key, db=chats)
            if old is not None:                # expired: it goes
                self._drop(txn, "chats", chat_id, _order_key("chats", CHAT.unpack_from(old)[1]))
            n = self._next_n(txn, "chats")
            txn.put(key, CHAT.pack(expires, n) + record, db=chats)
            self._add_newest(txn, "chats", n, chat_id)
        await self._write(put)

    async def get_chat(self, chat_id: str) -> bytes | None:
        live = self._read(lambda txn: self._live_chat(txn, chat_id))
        return None if live is None else live[2]

    async def delete_chat(self, chat_id: str) -> bool:
        return await self._delete("chats", chat_id)

    async def chats(self) -> list[bytes]:
        prefix = KINDS["chats"]

        def read(txn) -> list[bytes]:
            found = []
            cursor = txn.cursor(db=self.db["order"])
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not key.startswith(prefix):
                        break
                    live = self._live_chat(txn, value.decode())
                    if live is not None:
                        found.append(live[2])
            return found
        return self._read(read)

    # ---- pending webhook deliveries -----------------------------------------------------
    async def attempt(self, key: str) -> int:
        """How many requests (this one included) reached a scenario's error turn with this
        history (llmsim.faults.scripted), counted in `meta` for every process."""
        row = b"attempts\0" + key.encode()

        def bump(txn) -> int:
            count = int(txn.get(row, b"0", db=self.db["meta"])) + 1
            txn.put(row, str(count).encode(), db=self.db["meta"])
            return count
        return await self._write(bump)

    async def outbox_put(self, key: str, entry: bytes) -> None:
        await self._write(lambda txn: txn.put(key.encode(), entry, db=self.db["outbox"]) and None)

    async def outbox_delete(self, key: str) -> None:
        await self._write(lambda txn: txn.delete(key.encode(), db=self.db["outbox"]) and None)

    async def outbox(self) -> list[bytes]:
        return self._read(lambda txn: [bytes(value) for _, value in txn.cursor(db=self.db["outbox"])])

    async def flush(self) -> None:
        """Commit the writes still waiting (every call is done when it returns)."""
        self._commit()

    async def close(self) -> None:
        self._commit()
        if self._env is not None:
            _release_env(self.path)
            self._env = None


class LmdbPrefixTable:
    """The serving model's prefix cache for the processes of a host sharing an LMDB store (its
    own table, `prefix`). Per model: `b` block hash -> last use, `o` last use -> block hash
    (oldest first, for eviction), `c` the clock, `n` the block count; a lookup is one write,
    batched with the store's other writes of the loop step."""

    def __init__(self, store: LmdbStore):
        self.store = store
        self.db = store._open().open_db(b"prefix")

    async def lookup(self, model: str, hashes: list[bytes], capacity: int) -> tuple[int, int]:
        return await self.store._write(lambda txn: self._lookup(txn, model.encode(), hashes, capacity))

    def _lookup(self, txn, model: bytes, hashes: list[bytes], capacity: int) -> tuple[int, int]:
        db, head = self.db, model + b"\0"
        clock = int.from_bytes(txn.get(b"c" + head, b"", db=db), "big")
        n = int.from_bytes(txn.get(b"n" + head, b"", db=db), "big")
        used = [txn.get(b"b" + head + h, db=db) for h in hashes]
        hits = next((i for i, stamp in enumerate(used) if stamp is None), len(used))
        for h, stamp in zip(reversed(hashes), reversed(used)):     # the chain's head used last
            clock += 1
            now = clock.to_bytes(8, "big")
            if stamp is None:
                n += 1
            else:
                txn.delete(b"o" + head + stamp, db=db)
            txn.put(b"b" + head + h, now, db=db)
            txn.put(b"o" + head + now, h, db=db)
        if n > capacity:
            cursor, oldest = txn.cursor(db=db), b"o" + head
            cursor.set_range(oldest)
            while n > capacity and cursor.key().startswith(oldest):
                txn.delete(b"b" + head + cursor.value(), db=db)
                cursor.delete()
                n -= 1
        txn.put(b"c" + head, clock.to_bytes(8, "big"), db=db)
        txn.put(b"n" + head, n.to_bytes(8, "big"), db=db)
        return hits, n


_OPEN: dict[str, list] = {}   # real path -> [environment, tables, stores using it]: LMDB allows
                              # one environment per file per process


def _open_env(path: str, max_bytes: int | None = None) -> tuple[lmdb.Environment, dict]:
    real = str(Path(path).resolve())
    if real not in _OPEN:
        try:                                  # (the store made the directory)
            env = lmdb.open(real, map_size=min(MAP_SIZE, max_bytes or MAP_SIZE), max_dbs=16, sync=False, metasync=False,
                            writemap=True, readahead=False, max_readers=512)
            size = env.info()["map_size"]
            if (reserved := reserve(env, size)) < size:     # before anything is written through the map
                env.set_mapsize(reserved)
        except (OSError, lmdb.Error) as exc:
            raise ConfigError(f"store: cannot open the LMDB store {path!r}: {exc}") from None
        tables = {name: env.open_db(name.encode()) for name in
                  ("responses", "frames", "conversations", "items", "item_ids", "order", "meta",
                                    "outbox", "chats", "active")}
        _check_format(env, tables, path)
        _index_active(env, tables)
        _OPEN[real] = [env, tables, 0]
    entry = _OPEN[real]
    entry[2] += 1
    return entry[0], entry[1]


def reserve(env: lmdb.Environment, size: int) -> int:
    """Allocate the disk blocks of the map's file up to `size` bytes, or the most the disk has
    room for (halving, down to the pages in use); the size allocated. The map is written
    through (writemap) and its file is sparse: a page the disk had no room for would be a
    SIGBUS that kills the server, where a full map is an error (evict, or 503)."""
    used = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    fd = os.open(os.path.join(env.path(), "data.mdb"), os.O_RDWR)
    try:
        while size > used:
            try:
                os.posix_fallocate(fd, 0, size)
                return size
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                    return size     # a file system that cannot say: as it was
                size = max(used, size // 2 // PAGE * PAGE)
        return used
    finally:
        os.close(fd)


def _check_format(env: lmdb.Environment, tables: dict, path: str) -> None:
    """Mark a new store with FORMAT; refuse one written in another layout."""
    with env.begin(write=True) as txn:
        found = txn.get(b"format", db=tables["meta"])
        if found is None and txn.stat(tables["responses"])["entries"] == 0:
            txn.put(b"format", FORMAT, db=tables["meta"])
            return
    if found != FORMAT:
        env.close()
        raise ConfigError(f"store: {path!r} holds an LMDB store of another llmsim version (format "
                          f"{(found or b'1').decode()}, this one reads {FORMAT.decode()}); remove the "
                          "directory or name a new one with --store lmdb:DIR")


def _index_active(env: lmdb.Environment, tables: dict) -> None:
    """Fill the `active` table once, in a store written before it was kept."""
    with env.begin(write=True) as txn:
        if txn.get(b"active_index", db=tables["meta"]) is None:
            for key, value in txn.cursor(db=tables["responses"]):
                if Row.parse(value).status in ACTIVE:
                    txn.put(key, b"", db=tables["active"])
            txn.put(b"active_index", b"1", db=tables["meta"])


def _release_env(path: str) -> None:
    real = str(Path(path).resolve())
    entry = _OPEN.get(real)
    if entry is not None:
        entry[2] -= 1
        if entry[2] <= 0:
            del _OPEN[real]
            entry[0].close()
