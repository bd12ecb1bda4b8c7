"""The embedded store of `llmsim serve`: one LMDB environment (`--store lmdb:DIR`), a
memory-mapped B+tree that every worker process maps and writes under LMDB's own
cross-process write lock.

A write transaction costs a few microseconds and never syncs to disk (a simulator's state
need not survive a machine crash), so every call runs to completion on the event loop: a
write is committed, and readable by every process, when its call returns, with no thread, no
batching and no checkpoints. Readers never wait for writers.

Tables (LMDB sub-databases), keys built from ids (which never contain NUL):
- `responses`: id -> HEAD (expires, creation number n, frame count), status, response JSON,
  meta JSON;
- `frames`: id NUL first_seq -> frame count, LZ4-compressed frames first_seq.. (the frames a
  response is created with, then one row per append);
- `conversations`: id -> (expires, n, next item position), record JSON;
- `items`: conversation id NUL position -> item JSON; `item_ids`: conversation id NUL item id
  -> position;
- `order`: kind byte + n -> id, the creation order that eviction walks from the oldest.

Expired entries read as missing; every `SWEEP_EVERY` writes the oldest `SWEEP_EVERY`
entries of each kind are looked at and the expired ones deleted. The map (and the file, which
is sparse) starts at `MAP_SIZE` and doubles whenever a write fills it; the other processes
adopt the new size on their next transaction.
"""
from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import lmdb
import orjson

from llmsim.errors import ConfigError
from llmsim.jsonbytes import dumps
from llmsim.store.base import ACTIVE, Bounds, Conversation, StoredResponse, frames_after, pack

MAP_SIZE = 64 << 20          # the map (and, sparse, the file) to start with; it doubles when full
SWEEP_EVERY = 256
RESPONSE = struct.Struct("<dQIBI")      # expires, n, events, len(status), len(response)
CONVERSATION = struct.Struct("<dQQ")    # expires, n, next item position
POSITION = struct.Struct(">Q")
SEQ = struct.Struct(">I")
COUNT = struct.Struct("<I")
KINDS = {"responses": b"r", "conversations": b"c"}


def _order_key(kind: str, n: int) -> bytes:
    return KINDS[kind] + POSITION.pack(n)


def _key(*parts: str | bytes) -> bytes:
    return b"\0".join(p.encode() if isinstance(p, str) else p for p in parts)


def _response_value(expires: float, n: int, events: int, status: str, response: bytes, meta: bytes) -> bytes:
    status_b = status.encode()
    return RESPONSE.pack(expires, n, events, len(status_b), len(response)) + status_b + response + meta


def _response_fields(value: bytes) -> tuple[float, int, int, str, bytes, bytes]:
    expires, n, events, status_len, response_len = RESPONSE.unpack_from(value)
    at = RESPONSE.size
    status = value[at:at + status_len].decode()
    at += status_len
    return expires, n, events, status, value[at:at + response_len], value[at + response_len:]


class LmdbStore:
    def __init__(self, path: str, bounds: Bounds):
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"store: cannot create the LMDB directory {path!r}: {exc}") from None
        self.path = path
        self.bounds = bounds
        self._env: lmdb.Environment | None = None
        self._writes = 0

    # ---- plumbing --------------------------------------------------------------------
    def _open(self) -> lmdb.Environment:
        if self._env is None:
            self._env, self.db = _open_env(self.path)
        return self._env

    def _transact(self, body: Callable, write: bool = False) -> Any:
        """`body(txn)` in one transaction (committed when it returns, for a write). The map
        starts small and doubles when a write fills it; another process's growth is adopted."""
        env = self._open()
        while True:
            try:
                with env.begin(write=write) as txn:
                    result = body(txn)
                break
            except lmdb.MapFullError:
                env.set_mapsize(env.info()["map_size"] * 2)
            except lmdb.MapResizedError:
                env.set_mapsize(0)
        if write:
            self._writes += 1
            if self._writes % SWEEP_EVERY == 0:
                self._transact(self._sweep, write=True)
        return result

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
        key = KINDS[kind]
        raw = txn.get(key, db=self.db["seq"])
        n = (POSITION.unpack(raw)[0] if raw else 0) + 1
        txn.put(key, POSITION.pack(n), db=self.db["seq"])
        return n

    def _created(self, txn, kind: str, n: int, entry_id: str) -> None:
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
            events = 0 if value is None else RESPONSE.unpack_from(value)[2]
            first = txn.pop(_key(entry_id, SEQ.pack(0)), db=self.db["frames"]) if events else None
            if events and (first is None or COUNT.unpack_from(first)[0] < events):   # appended later
                self._delete_prefix(txn, "frames", _key(entry_id, b""))
            return value is not None
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
        fields = _response_fields(raw)
        return fields if fields[0] > time.time() else None

    def _live_conversation(self, txn, conversation_id: str):
        raw = txn.get(conversation_id.encode(), db=self.db["conversations"])
        if raw is None:
            return None
        expires, n, next_pos = CONVERSATION.unpack_from(raw)
        return (expires, n, next_pos, raw[CONVERSATION.size:]) if expires > time.time() else None

    def _delete(self, kind: str, entry_id: str) -> bool:
        """Delete an entry that has not expired (and what hangs off it); whether there was one."""
        live = self._live_response if kind == "responses" else self._live_conversation

        def delete(txn) -> bool:
            found = live(txn, entry_id)       # (expires, n, ...)
            if found is not None:
                self._drop(txn, kind, entry_id, _order_key(kind, found[1]))
            return found is not None
        return self._transact(delete, write=True)

    # ---- responses -------------------------------------------------------------------
    async def put_response(self, record: StoredResponse, frames: Sequence[bytes] = ()) -> None:
        key, response, meta = record.id.encode(), dumps(record.response), record.meta_json()
        blob = pack(frames)

        def put(txn) -> None:
            old = txn.get(key, db=self.db["responses"])
            if old is not None:
                self._drop(txn, "responses", record.id, _order_key("responses", RESPONSE.unpack_from(old)[1]))
            n = self._next_n(txn, "responses")
            txn.put(key, _response_value(self.bounds.expires(time.time()), n, len(frames), record.status,
                                         response, meta), db=self.db["responses"])
            if blob:
                txn.put(_key(record.id, SEQ.pack(0)), COUNT.pack(len(frames)) + blob, db=self.db["frames"])
            self._created(txn, "responses", n, record.id)
        self._transact(put, write=True)

    async def get_response(self, response_id: str) -> StoredResponse | None:
        fields = self._transact(lambda txn: self._live_response(txn, response_id))
        if fields is None:
            return None
        _, _, events, _, response, meta = fields
        return StoredResponse.from_json(response_id, response, meta, events)

    async def delete_response(self, response_id: str) -> bool:
        return self._delete("responses", response_id)

    async def append_events(self, response_id: str, frames: Sequence[bytes],
                            snapshot: dict | None = None, *, expect_events: int | None = None) -> bool:
        blob = pack(frames)
        new_response = dumps(snapshot) if snapshot is not None else None

        def append(txn) -> bool:
            fields = self._live_response(txn, response_id)
            if fields is None:
                return False
            _, n, count, status, response, meta = fields
            if status not in ACTIVE or (expect_events is not None and count != expect_events):
                return False
            if blob:
                txn.put(_key(response_id, SEQ.pack(count)), COUNT.pack(len(frames)) + blob, db=self.db["frames"])
            if new_response is not None:
                status, response = snapshot.get("status"), new_response
            txn.put(response_id.encode(), _response_value(self.bounds.expires(time.time()), n, count + len(frames),
                                                          status, response, meta), db=self.db["responses"])
            return True
        return self._transact(append, write=True)

    async def events(self, response_id: str, after: int) -> tuple[list[bytes], str | None]:
        def read(txn):
            fields = self._live_response(txn, response_id)
            return None if fields is None else (fields[3], self._rows(txn, "frames", response_id))
        found = self._transact(read)
        if found is None:
            return [], None
        status, rows = found
        frames: list[bytes] = []
        for key, value in rows:
            first_seq, count = SEQ.unpack(key)[0], COUNT.unpack_from(value)[0]
            if first_seq + count - 1 > after:
                frames += frames_after(value[COUNT.size:], first_seq, after)
        return frames, status

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
            self._created(txn, "conversations", n, conversation.id)
        self._transact(put, write=True)

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        live = self._transact(lambda txn: self._live_conversation(txn, conversation_id))
        return None if live is None else Conversation.from_json(conversation_id, live[3])

    async def delete_conversation(self, conversation_id: str) -> bool:
        return self._delete("conversations", conversation_id)

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
        return self._transact(add, write=True)

    async def conversation_items(self, conversation_id: str) -> list[dict] | None:
        def read(txn):
            if self._live_conversation(txn, conversation_id) is None:
                return None
            return self._rows(txn, "items", conversation_id)
        rows = self._transact(read)
        return None if rows is None else [orjson.loads(value) for _, value in rows]

    async def get_item(self, conversation_id: str, item_id: str) -> dict | None:
        def read(txn):
            if self._live_conversation(txn, conversation_id) is None:
                return None
            position = txn.get(_key(conversation_id, item_id), db=self.db["item_ids"])
            return None if position is None else txn.get(_key(conversation_id, position), db=self.db["items"])
        raw = self._transact(read)
        return None if raw is None else orjson.loads(raw)

    async def delete_item(self, conversation_id: str, item_id: str) -> bool:
        def delete(txn) -> bool:
            if self._live_conversation(txn, conversation_id) is None:
                return False
            position = txn.pop(_key(conversation_id, item_id), db=self.db["item_ids"])
            if position is not None:
                txn.delete(_key(conversation_id, position), db=self.db["items"])
            return position is not None
        return self._transact(delete, write=True)

    async def flush(self) -> None:
        """Every call is done when it returns."""

    async def close(self) -> None:
        if self._env is not None:
            _release_env(self.path)
            self._env = None


_OPEN: dict[str, list] = {}   # real path -> [environment, tables, stores using it]: LMDB allows
                              # one environment per file per process


def _open_env(path: str) -> tuple[lmdb.Environment, dict]:
    real = str(Path(path).resolve())
    if real not in _OPEN:
        try:                                  # (the store made the directory)
            env = lmdb.open(real, map_size=MAP_SIZE, max_dbs=8, sync=False, metasync=False,
                            writemap=True, readahead=False, max_readers=512)
        except (OSError, lmdb.Error) as exc:
            raise ConfigError(f"store: cannot open the LMDB store {path!r}: {exc}") from None
        tables = {name: env.open_db(name.encode()) for name in
                  ("responses", "frames", "conversations", "items", "item_ids", "order", "seq")}
        _OPEN[real] = [env, tables, 0]
    entry = _OPEN[real]
    entry[2] += 1
    return entry[0], entry[1]


def _release_env(path: str) -> None:
    real = str(Path(path).resolve())
    entry = _OPEN.get(real)
    if entry is not None:
        entry[2] -= 1
        if entry[2] <= 0:
            del _OPEN[real]
            entry[0].close()
