"""What the stateful Responses API keeps (and stored chat completions), and the interface
every backend implements.

Invariants: records are plain data; a backend keeps at most `max_entries` of each kind (the
oldest evicted first), each living `ttl_s` after its last write; anything evicted or expired
reads as missing, never as an error; writes are atomic, and `append_events` is the one
conditional write (how a background run and a cancel agree); a write returns once every
process can read it. Also here: a full file store's `Eviction` and the loop-step
`StepBatch`. The story: docs/internals.md#statestorebase.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import lz4.frame
import orjson

from llmsim.errors import ServiceUnavailableError
from llmsim.render.jsonbytes import dumps
from llmsim.state.store.capabilities import Capabilities

log = logging.getLogger("llmsim")
ACTIVE = ("queued", "in_progress")
NEVER = float("inf")


def outages_answered(outage: Callable[[Exception], str | None]):
    """A class decorator: every public coroutine of the class raises the exceptions for which
    `outage` gives a message (the store unreachable, or full) as ServiceUnavailableError (503
    service_unavailable), so the client gets the provider's envelope at once, not a 500."""
    def wrap(method):
        @functools.wraps(method)
        async def answered(self, *args, **kwargs):
            try:
                return await method(self, *args, **kwargs)
            except Exception as exc:
                message = outage(exc)
                if message is None:
                    raise
                raise ServiceUnavailableError(message) from exc
        return answered

    def decorate(cls):
        for name, method in list(vars(cls).items()):
            if inspect.iscoroutinefunction(method) and not name.startswith("_") and name != "close":
                setattr(cls, name, wrap(method))
        return cls
    return decorate


@dataclass(frozen=True, slots=True)
class Bounds:
    max_entries: int
    ttl_s: float | None      # None: entries never expire
    evict_when_full: bool = True     # a full file store evicts its oldest entries to write

    def expires(self, now: float) -> float:
        return NEVER if self.ttl_s is None else now + self.ttl_s


class Frames(Sequence):
    """SSE frames kept together: one blob of whole frames (each ends with a blank line and
    contains no other), counted without splitting it; indexing or iterating splits it once.
    `Frames.later(render, count)` are frames not rendered yet: `render()` makes the blob
    when something first reads it (the memory store never does until a replay)."""
    __slots__ = ("_blob", "_count", "_split", "render")

    def __init__(self, blob: bytes, count: int | None = None):
        self._blob, self.render = blob, None
        self._count = blob.count(b"\n\n") if count is None else count   # a scan: pass it when known
        self._split: list[bytes] | None = None

    @classmethod
    def later(cls, render: Callable[[], bytes], count: int) -> "Frames":
        frames = cls.__new__(cls)
        frames._blob, frames.render, frames._count, frames._split = None, render, count, None
        return frames

    @property
    def blob(self) -> bytes:
        if self._blob is None:
            self._blob = self.render()
        return self._blob

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        if self._split is None:
            self._split = [frame + b"\n\n" for frame in self.blob.split(b"\n\n")[:-1]]
        return self._split[index]


def blob_of(frames: Sequence[bytes]) -> bytes:
    return frames.blob if isinstance(frames, Frames) else b"".join(frames)


LZ4_MAGIC = b"\x04\x22\x4d\x18"    # how an LZ4 frame starts; SSE frames never do


def pack(frames: Sequence[bytes]) -> bytes:
    """Frames as kept by the file stores: one LZ4-compressed blob (a stream's frames are
    mostly repeated keys, so they shrink several times over; LZ4 because it is much faster
    than zlib)."""
    return lz4.frame.compress(blob_of(frames)) if frames else b""


def frames_after(blob: bytes, first_seq: int, after: int) -> list[bytes]:
    """The frames of a packed blob (sequence numbers first_seq..) numbered above `after`.
    A blob not starting like LZ4 holds raw frames (SQLite files from before compression, a
    memory store's stream rendered again)."""
    raw = lz4.frame.decompress(blob) if blob.startswith(LZ4_MAGIC) else blob
    return [frame + b"\n\n" for frame in raw.split(b"\n\n")[:-1]][max(0, after + 1 - first_seq):]


class StoredResponse:
    """One stored response: `response` is its latest snapshot; `events` counts its SSE frames.
    A snapshot given as JSON (`response_json`, the bytes a handler already wrote) is kept as it
    is and parsed only if something reads `response`; one given as `render` (a callable making
    that JSON) is rendered only when something reads it (`deferred` until then)."""
    __slots__ = ("id", "_response", "_json", "_status", "input_items", "background", "conversation",
                 "events", "render", "owner")

    def __init__(self, id: str, response: dict[str, Any] | None = None,
                 input_items: list[dict[str, Any]] | None = None, background: bool = False,
                 conversation: str | None = None, events: int = 0, *,
                 response_json: bytes | None = None, status: str | None = None,
                 render: Callable[[], bytes] | None = None, owner: str | None = None):
        self.id, self._response, self._json, self._status = id, response, response_json, status
        self.owner = owner      # a background response: the process running it (llmsim.state.background)
        self.input_items = [] if input_items is None else input_items
        self.background, self.conversation, self.events = background, conversation, events
        self.render = render

    @property
    def deferred(self) -> bool:
        return self._json is None and self._response is None and self.render is not None

    @property
    def response(self) -> dict[str, Any]:
        if self._response is None:
            self._response = orjson.loads(self.response_json())
        return self._response

    def response_json(self) -> bytes:
        if self._json is None:
            self._json = self.render() if self._response is None and self.render is not None \
                else dumps(self._response)
        return self._json

    @property
    def status(self) -> str:
        if self._status is None:
            self._status = self.response.get("status", "completed")
        return self._status

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def output_items(self) -> list[dict[str, Any]]:
        return self.response.get("output") or []

    def meta_json(self) -> bytes:
        meta = {"input_items": self.input_items, "background": self.background, "conversation": self.conversation}
        if self.owner is not None:
            meta["owner"] = self.owner
        return dumps(meta)

    @classmethod
    def from_json(cls, response_id: str, response: bytes, meta: bytes, events: int,
                  status: str | None = None) -> "StoredResponse":
        extra = orjson.loads(meta)
        return cls(response_id, None, extra["input_items"], extra["background"], extra["conversation"],
                   events, response_json=response, status=status, owner=extra.get("owner"))


@dataclass(slots=True)
class Conversation:
    id: str
    created_at: int
    metadata: dict[str, str]

    def to_json(self) -> bytes:
        return dumps({"created_at": self.created_at, "metadata": self.metadata})

    @classmethod
    def from_json(cls, conversation_id: str, raw: bytes) -> "Conversation":
        doc = orjson.loads(raw)
        return cls(conversation_id, doc["created_at"], doc["metadata"])


class Store(Protocol):
    """The backend interface (`llmsim.state.store.lmdb`, `llmsim.state.store.sqlite`, `llmsim.state.store.redis`)."""

    needs_task: bool
    """Whether its calls must run inside an asyncio task (a client library's timeouts or
    locks ask for `asyncio.current_task()`): if so, no request starts before it has a task
    of its own (llmsim.server.starting, llmsim.api.front's `eager`)."""

    capabilities: Capabilities
    """What it can do beyond this interface (llmsim.state.store.capabilities): set by the
    backend, checked by `open_store`."""

    async def put_response(self, record: StoredResponse, frames: Sequence[bytes] = ()) -> None:
        """Create (or replace) a response with its first SSE frames."""

    async def get_response(self, response_id: str) -> StoredResponse | None: ...

    async def delete_response(self, response_id: str) -> bool: ...

    async def append_events(self, response_id: str, frames: Sequence[bytes],
                            snapshot: dict | None = None, *, expect_events: int | None = None) -> bool:
        """Atomically add frames (and a new snapshot) to a response that is still queued or
        in progress and, with `expect_events`, has exactly that many frames. False otherwise."""

    async def events(self, response_id: str, after: int) -> tuple[list[bytes], str | None]:
        """Frames with sequence number > `after`, and the current status (None: gone)."""

    async def put_conversation(self, conversation: Conversation) -> None:
        """Create a conversation or update its metadata (items are kept)."""

    async def get_conversation(self, conversation_id: str) -> Conversation | None: ...

    async def delete_conversation(self, conversation_id: str) -> bool: ...

    async def add_items(self, conversation_id: str, items: Sequence[dict]) -> bool:
        """Append items; False when the conversation is gone."""

    async def conversation_items(self, conversation_id: str) -> list[dict] | None:
        """All items, oldest first; None when the conversation is gone."""

    async def get_item(self, conversation_id: str, item_id: str) -> dict | None: ...

    async def delete_item(self, conversation_id: str, item_id: str) -> bool: ...

    async def put_chat(self, chat_id: str, record: bytes) -> None:
        """Create a stored chat completion (`record`: its JSON, llmsim.state.chats), or replace
        the record of one that exists (it keeps its place in creation order)."""

    async def get_chat(self, chat_id: str) -> bytes | None: ...

    async def delete_chat(self, chat_id: str) -> bool: ...

    async def chats(self) -> list[bytes]:
        """Every stored chat completion's record, oldest first."""

    async def outbox_put(self, key: str, entry: bytes) -> None:
        """Keep a pending webhook delivery (llmsim.state.webhooks) until `outbox_delete`:
        never evicted, never expired."""

    async def outbox_delete(self, key: str) -> None: ...

    async def outbox(self) -> list[bytes]:
        """Every pending delivery (what a restarted server sends)."""

    async def flush(self) -> None:
        """Wait until every call made so far is done."""

    async def close(self) -> None:
        """Flush, then let go of connections (a later call opens them again)."""


@dataclass(slots=True)
class Page:
    items: list[dict]
    has_more: bool


def paginate(items: list[dict], *, after: str | None = None, before: str | None = None,
             limit: int = 20, order: str = "desc") -> Page | None:
    """One page of `items` (oldest first) in `order`, strictly after / before the items with
    those ids; None when a cursor names no item. With only `before`, the page is the `limit`
    items just before it (the previous page), `has_more` telling whether more precede them."""
    ordered = items if order == "asc" else items[::-1]
    ids = [item.get("id") for item in ordered]
    start, stop = 0, len(ordered)
    if after is not None:
        if after not in ids:
            return None
        start = ids.index(after) + 1
    if before is not None:
        if before not in ids:
            return None
        stop = ids.index(before)
    window = ordered[start:stop]
    if before is not None and after is None:
        return Page(window[-limit:], len(window) > limit)
    return Page(window[:limit], len(window) > limit)


EVICT_MAX = 256     # entries a write that finds a full file store may evict (then: 503)


class Eviction:
    """What a full file store does (`store_evict_when_full`): rounds evicting the oldest 1, 1,
    2, 4, ... entries of each kind (responses still running excepted), the write tried again
    after each, up to EVICT_MAX entries in all; then, or when it is off, the write fails (503).
    A warning the first time, then (a full store evicts at every write) debug."""
    __slots__ = ("enabled", "where", "seen")

    def __init__(self, enabled: bool, where: str):
        self.enabled, self.where, self.seen = enabled, where, False

    def make_room(self, evicted: int, evict_oldest: Callable[[int], int]) -> int:
        """After a write found the store full, `evicted` entries having gone for it so far:
        the next round (`evict_oldest(count)` evicts count of each kind, says how many went);
        how many went (0: give up, the write fails)."""
        if not self.enabled or evicted >= EVICT_MAX:
            return 0
        gone = evict_oldest(max(1, evicted))
        if gone:
            log.log(logging.DEBUG if self.seen else logging.WARNING,
                    "store %s full: evicted its %d oldest entries (store_evict_when_full)", self.where, gone)
            self.seen = True
        return gone


class StepBatch:
    """The writes made during one step of the event loop, run together as it ends (one
    transaction, one commit or round trip for all): `add(call)` queues `(*call, future)`, the
    first of a step scheduling `run()`, which takes `queued` and settles each future."""
    __slots__ = ("run", "queued")

    def __init__(self, run: Callable[[], None]):
        self.run, self.queued = run, []

    def add(self, *call) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self.queued:
            loop.call_soon(self.run)
        self.queued.append((*call, future))
        return future

    def take(self) -> list:
        batch, self.queued = self.queued, []
        return batch


def settle(outcomes: Sequence[tuple[asyncio.Future, Any, bool]]) -> None:
    """Give each waiting future its (value, True) result or its (exception, False) error."""
    for future, value, ok in outcomes:
        if future.done():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
