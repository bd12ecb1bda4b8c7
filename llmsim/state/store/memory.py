"""The store of a single process: ordered dicts, no file, no lock, no thread.

Every call runs to completion without awaiting, so each is atomic and visible to the next
at once. Entries hold what the other backends hold (JSON, LZ4-packed frames), except that a
small stream no fault cut is kept as what renders it again (the `keeps_now` capability),
rendered only if read. Eviction pops the oldest from the front. Private to its process:
`--workers` need a shared store. The story: docs/internals.md#statestorememory.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from itertools import islice
from typing import Callable, Sequence

import orjson

from llmsim.render.jsonbytes import dumps
from llmsim.state.store.capabilities import Capabilities
from llmsim.state.store.base import ACTIVE, Bounds, Conversation, StoredResponse, frames_after, pack

SWEEP_EVERY = 256


def _owned(data: bytes) -> bytes:
    """A copy of exactly `data`: orjson's output keeps the whole buffer it was written in
    (often several times the response's size), which would stay allocated as long as the
    entry (formatting, not `memoryview(data).tobytes()`: docs/performance.md#what-is-kept-for-speed)."""
    return b"%b" % data


class _Response:
    __slots__ = ("expires", "status", "response", "meta", "events", "chunks")

    def __init__(self, expires: float, status: str, response: bytes, meta: tuple, events: int,
                 chunks: list[tuple[int, int, bytes]]):
        self.expires, self.status, self.response, self.meta = expires, status, response, meta
        self.events = events
        self.chunks = chunks     # (first sequence number, frame count, packed frames or what renders them)


class _Conversation:
    __slots__ = ("expires", "record", "items", "positions", "next_position")

    def __init__(self, expires: float, record: bytes):
        self.expires, self.record = expires, record
        self.items: dict[int, bytes] = {}          # position -> item JSON, in position order
        self.positions: dict[str, int] = {}        # item id -> position
        self.next_position = 0


class _Chat:
    __slots__ = ("expires", "record")

    def __init__(self, expires: float, record: bytes):
        self.expires, self.record = expires, record


class MemoryStore:
    needs_task = False  # plain dicts: nothing awaited

    def __init__(self, bounds: Bounds):
        self.bounds = bounds
        self._responses: OrderedDict[str, _Response] = OrderedDict()
        self._conversations: OrderedDict[str, _Conversation] = OrderedDict()
        self._chats: OrderedDict[str, _Chat] = OrderedDict()
        self._writes = 0
        self._outbox: dict[str, bytes] = {}
        # it writes at once, and keeps a deferred record (and frames) as what renders it
        self.capabilities = Capabilities(keeps_now=self)

    # ---- plumbing --------------------------------------------------------------------
    def _live(self, table: dict, entry_id: str):
        entry = table.get(entry_id)
        return entry if entry is not None and entry.expires > time.time() else None

    def _add_newest(self, table: OrderedDict, entry_id: str, entry) -> None:
        """Add `entry` as the newest of `table`, evicting the oldest beyond `max_entries`."""
        table[entry_id] = entry
        table.move_to_end(entry_id)           # a replaced entry counts as new
        if len(table) > self.bounds.max_entries:      # (entries come one at a time: one goes)
            table.popitem(last=False)
        self._wrote()

    def _delete(self, table: OrderedDict, entry_id: str) -> bool:
        """Delete an entry that has not expired; whether there was one."""
        if self._live(table, entry_id) is None:
            return False
        del table[entry_id]
        self._wrote()
        return True

    def _wrote(self) -> None:
        self._writes += 1
        if self._writes % SWEEP_EVERY == 0:
            now = time.time()
            for table in (self._responses, self._conversations, self._chats):
                for entry_id in [key for key, entry in islice(table.items(), SWEEP_EVERY) if entry.expires <= now]:
                    del table[entry_id]

    # ---- responses -------------------------------------------------------------------
    def put_json(self, response_id: str, response_json: bytes, status: str, input_items: list[dict],
                 background: bool, conversation: str | None) -> None:
        """`put_response` of the JSON a handler wrote, with no SSE frames, made at once (not a
        coroutine) from its parts (no record): a stored non-streamed answer."""
        entry = _Response(self.bounds.expires(time.time()), status, b"%b" % response_json,
                          (input_items, background, conversation), 0, [])
        self._add_newest(self._responses, response_id, entry)

    def put_replay(self, response_id: str, status: str, render_response: Callable[[], bytes],
                   render_frames: Callable[[], bytes], events: int, input_items: list[dict],
                   background: bool) -> None:
        """`put_response` of a deferred record (a stream kept as what renders it, in no
        conversation) with `events` frames not rendered yet, made at once from its parts."""
        chunks = [(0, events, render_frames)] if events else []
        entry = _Response(self.bounds.expires(time.time()), status, render_response,
                          (input_items, background, None), events, chunks)
        self._add_newest(self._responses, response_id, entry)

    async def put_response(self, record: StoredResponse, frames: Sequence[bytes] = ()) -> None:
        written = record._json       # the JSON a handler wrote (most answers): no property read
        if written is not None:
            response = b"%b" % written      # `_owned`, in place
        else:
            response = record.render if record.deferred else _owned(record.response_json())
        if frames:      # frames not rendered yet stay so
            chunks = [(0, len(frames), getattr(frames, "render", None) or pack(frames))]
        else:
            chunks = []
        # its input items as they are: a reader gets a copy (`get_response`)
        meta = (record.input_items, record.background, record.conversation)
        status = record._status
        entry = _Response(self.bounds.expires(time.time()), record.status if status is None else status,
                          response, meta, len(frames), chunks)
        self._add_newest(self._responses, record.id, entry)

    async def get_response(self, response_id: str) -> StoredResponse | None:
        entry = self._live(self._responses, response_id)
        if entry is None:
            return None
        if entry.response.__class__ is not bytes:       # rendered once, when first read
            entry.response = _owned(entry.response())
        items, background, conversation = entry.meta
        return StoredResponse(response_id, None, orjson.loads(dumps(items)), background, conversation,
                              entry.events, response_json=entry.response, status=entry.status)

    async def delete_response(self, response_id: str) -> bool:
        return self._delete(self._responses, response_id)

    async def append_events(self, response_id: str, frames: Sequence[bytes],
                            snapshot: dict | None = None, *, expect_events: int | None = None) -> bool:
        entry = self._live(self._responses, response_id)
        if entry is None or entry.status not in ACTIVE or (expect_events is not None and entry.events != expect_events):
            return False
        if frames:
            entry.chunks.append((entry.events, len(frames), pack(frames)))
        if snapshot is not None:
            entry.status, entry.response = snapshot.get("status"), _owned(dumps(snapshot))
        entry.events += len(frames)
        entry.expires = self.bounds.expires(time.time())
        self._wrote()
        return True

    async def events(self, response_id: str, after: int) -> tuple[list[bytes], str | None]:
        entry = self._live(self._responses, response_id)
        if entry is None:
            return [], None
        found: list[bytes] = []
        for first_seq, count, blob in entry.chunks:
            if first_seq + count - 1 > after:
                found += frames_after(blob if blob.__class__ is bytes else blob(), first_seq, after)
        return found, entry.status

    # ---- conversations ---------------------------------------------------------------
    async def put_conversation(self, conversation: Conversation) -> None:
        expires = self.bounds.expires(time.time())
        live = self._live(self._conversations, conversation.id)
        if live is not None:                  # new metadata; its items and its place stay
            live.record, live.expires = _owned(conversation.to_json()), expires
            self._wrote()
            return
        self._add_newest(self._conversations, conversation.id, _Conversation(expires, _owned(conversation.to_json())))

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        live = self._live(self._conversations, conversation_id)
        return None if live is None else Conversation.from_json(conversation_id, live.record)

    async def delete_conversation(self, conversation_id: str) -> bool:
        return self._delete(self._conversations, conversation_id)

    async def add_items(self, conversation_id: str, items: Sequence[dict]) -> bool:
        live = self._live(self._conversations, conversation_id)
        if live is None:
            return False
        for item in items:
            position = live.next_position
            live.items[position] = _owned(dumps(item))
            if item.get("id") is not None:
                live.positions[item["id"]] = position
            live.next_position += 1
        live.expires = self.bounds.expires(time.time())
        self._wrote()
        return True

    async def conversation_items(self, conversation_id: str) -> list[dict] | None:
        live = self._live(self._conversations, conversation_id)
        return None if live is None else [orjson.loads(raw) for raw in live.items.values()]

    async def get_item(self, conversation_id: str, item_id: str) -> dict | None:
        live = self._live(self._conversations, conversation_id)
        position = None if live is None else live.positions.get(item_id)
        return None if position is None else orjson.loads(live.items[position])

    async def delete_item(self, conversation_id: str, item_id: str) -> bool:
        live = self._live(self._conversations, conversation_id)
        position = None if live is None else live.positions.pop(item_id, None)
        if position is None:
            return False
        del live.items[position]
        self._wrote()
        return True

    # ---- stored chat completions -----------------------------------------------------
    async def put_chat(self, chat_id: str, record: bytes) -> None:
        expires = self.bounds.expires(time.time())
        live = self._live(self._chats, chat_id)
        if live is not None:                  # a new record; its place stays
            live.record, live.expires = _owned(record), expires
            self._wrote()
            return
        self._add_newest(self._chats, chat_id, _Chat(expires, _owned(record)))

    async def get_chat(self, chat_id: str) -> bytes | None:
        live = self._live(self._chats, chat_id)
        return None if live is None else live.record

    async def delete_chat(self, chat_id: str) -> bool:
        return self._delete(self._chats, chat_id)

    async def chats(self) -> list[bytes]:
        now = time.time()
        return [entry.record for entry in self._chats.values() if entry.expires > now]

    # ---- pending webhook deliveries (gone with the process, as everything here) -------------
    async def outbox_put(self, key: str, entry: bytes) -> None:
        self._outbox[key] = entry

    async def outbox_delete(self, key: str) -> None:
        self._outbox.pop(key, None)

    async def outbox(self) -> list[bytes]:
        return list(self._outbox.values())

    async def flush(self) -> None:
        """Nothing waits: every call is done when it returns."""

    async def close(self) -> None:
        """Nothing to let go of; the entries stay for a later call."""
