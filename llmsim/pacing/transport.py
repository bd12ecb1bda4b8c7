"""Send rendered events: as one JSON body, as SSE (or the SSE events' data as WebSocket
messages), paced by absolute deadlines.

Transports know nothing of an event's fields: they send what the template rendered (an SSE
stream: its frames, `Template.frames`) and wait for each event's due time (`start + at`).
Events already due are written together in one chunk, so a burst costs one socket write.
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Protocol

from starlette.responses import Response

from llmsim.clock import Clock
from llmsim.pacing.draining import Drain
from llmsim.pacing.pacer import PacedStream, send_now
from llmsim.render.jsonbytes import decimal, dumps
from llmsim.render.sse import payload

JSON = "application/json"
CONNECTION = "llmsim.connection"    # scope["extensions"] key: the server's `ConnectionHooks`


class ConnectionHooks(Protocol):
    """What a server that knows its connections installs in each request's scope (llmsim.server
    .connection, from above); a request without them takes ASGI's public path."""

    def chunk_writer(self, scope) -> Callable[[bytes, bool], bool] | None:
        """Write a body chunk straight to the connection (False: `send` must)."""

    def watch_disconnect(self, scope, callback: Callable[[], None]) -> Callable[[], None] | None:
        """Have `callback()` called when the client leaves; returns what calls it off."""


SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
_SSE_RAW_HEADERS = ((b"content-type", b"text/event-stream; charset=utf-8"),
                    *((k.encode("latin-1"), v.encode("latin-1")) for k, v in SSE_HEADERS.items()))
_JSON_TYPE = (b"content-type", JSON.encode())


def json_response(body, status: int = 200, headers: dict | None = None) -> Response:
    """A JSON answer: `body` is a JSON-able value or its serialised bytes (`Template.body_json`)."""
    content = body if body.__class__ is bytes else dumps(body)
    if headers is None and status == 200:
        return JSONBytes(content)
    return Response(content, status_code=status, media_type=JSON, headers=headers)


class JSONBytes(Response):
    """A 200 with JSON bytes and starlette's Response's headers (content-length, content-type),
    made directly rather than by its general path (given headers, charset, 204/304 rules)."""
    media_type = JSON

    def __init__(self, content: bytes):  # no super().__init__(): this sets what it would
        self.status_code, self.background, self.body = 200, None, content
        self.raw_headers = [(b"content-length", decimal(len(content))), _JSON_TYPE]


async def due_lists(timed: Iterable[tuple[float, Any]], start: float, clock: Clock,
                    keepalive: float | None = None, lateness=None,
                    until: str | None = None, drain: Drain | None = None) -> AsyncIterator[list]:
    """Pacing in the calling task, of (due time, item) pairs: lists of items, each sent when
    its first item is due (`start + due time`). The same state machine as the shared timer's
    (llmsim.pacing.pacer.PacedStream): with `keepalive` (seconds) an empty list comes every
    `keepalive` seconds while waiting for the first token; `lateness` (a `stats.Lateness`)
    records how late each list left; a ConnectionDrop in the items ends it after what was
    due before it. `until` "begun" (a WebSocket response) or "ended" (a background response):
    that phase of `drain`'s shutdown (the app's, llmsim.pacing.draining) ends it at once, with
    what is left of it.
    """
    written: list[list] = []
    stream = PacedStream(iter(timed), start, written.append, keepalive, lateness, clock)
    task = asyncio.current_task() if until and drain is not None else None
    try:
        following = stream.step(clock.now())
        while True:
            for batch in written:
                yield batch
            written.clear()
            if following is None:
                break
            if task is None:
                await clock.sleep_until(following)
                following = stream.step(clock.now())
                continue
            if drain.stopping(until):       # (it came while this stream was writing)
                following = stream.end(clock.now())
                continue
            sleepers = drain.waiting(until)
            sleepers.add(task)
            try:
                await clock.sleep_until(following)
            except asyncio.CancelledError:
                if not drain.stopping(until):
                    raise
                task.uncancel()             # the server is shutting down: what is left, now
                following = stream.end(clock.now())
                continue
            finally:
                sleepers.discard(task)
            following = stream.step(clock.now())
    finally:
        stream.close()
    if stream.done.exception() is not None:
        raise stream.done.exception()


def sse_chunk(frames: list[bytes], clock: Clock) -> bytes:
    """The SSE bytes of a batch of frames; an empty batch is a keep-alive comment line."""
    if len(frames) == 1:
        return frames[0]
    if frames:
        return b"".join(frames)
    return b": " + str(round(clock.wall(), 3)).encode() + b"\n\n"


class Paced:
    """SSE bytes: `frames` are (due time, frame) pairs (`Template.frames`, `sse.framed`),
    each frame written at its deadline (`start + due time`); frames already due go out as
    one chunk. With `keepalive` (seconds), comment lines go out while waiting for the first
    token; `lateness` (a `stats.Lateness`) records how late each chunk left.

    Iterated (`async for`), it paces in the iterating task. Given straight to `SSEResponse`
    on the real clock with a `drain` (the app's, which holds its pacers), it runs on the app's
    shared timer instead (llmsim.pacing.pacer).
    """

    on_chunk: Callable[[list, bytes], None] | None = None   # sees every batch of frames written
                                                            # and its bytes (none: a keep-alive)
    on_end: Callable[[], Awaitable[None] | None] | None = None  # called when the frames ran out
                                                                # (what it returns, awaited)
    on_left: Callable[[float], None] | None = None  # its client left an SSEResponse of it: seconds
                                                    # from `start` when it did

    def __init__(self, frames: Iterable[tuple[float, bytes]], start: float, clock: Clock,
                 keepalive: float | None = None, lateness=None, drain: Drain | None = None):
        self.frames, self.start, self.clock = iter(frames), start, clock
        self.keepalive, self.lateness, self.drain = keepalive, lateness, drain

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for batch in due_lists(self.frames, self.start, self.clock, self.keepalive,
                                     self.lateness):
            chunk = sse_chunk(batch, self.clock)
            if self.on_chunk is not None:
                self.on_chunk(batch, chunk)
            yield chunk
        if self.on_end is not None and (ending := self.on_end()) is not None:
            await ending



class SSEResponse(Response):
    """An event stream as an ASGI response: the headers, then each chunk as it comes.

    Lighter than starlette's StreamingResponse, which (under uvicorn's ASGI 2.3) runs every
    stream in an anyio task group beside a task listening for the client to leave. Served by
    `llmsim serve`'s protocol, the connection itself says when its client leaves
    (`ConnectionHooks.watch_disconnect`); elsewhere a stream still running after `WATCH_AFTER`
    seconds gets a listening task (instant streams never need one). When the client leaves,
    the stream is cancelled where it waits, and the response ends quietly.
    """
    WATCH_AFTER = 0.05
    media_type = "text/event-stream"

    def __init__(self, chunks: AsyncIterator[bytes], headers: dict | None = None):  # no super().__init__(), as above
        self.chunks = chunks
        self.status_code, self.background = 200, None
        self.raw_headers = list(_SSE_RAW_HEADERS) if not headers else [
            _SSE_RAW_HEADERS[0],        # the content type
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in {**SSE_HEADERS, **headers}.items())]
        self.finished = self.left = False
        self.head_written = False       # the status line and headers are out (llmsim.api.front)
        self._task: asyncio.Task | None = None
        self._waiting: asyncio.Future | None = None     # a paced stream's end, while awaited
        self._task_cancelled = False

    async def __call__(self, scope, receive, send) -> None:
        self._task = asyncio.current_task()     # None while started eagerly (llmsim.server.starting)
        watcher: list[asyncio.Task] = []
        extensions = scope.get("extensions")
        hooks: ConnectionHooks | None = extensions.get(CONNECTION) if extensions else None
        forget = hooks.watch_disconnect(scope, self._left) if hooks is not None else None
        if forget is None:
            loop = asyncio.get_running_loop()
            forget = loop.call_later(self.WATCH_AFTER, lambda: watcher.append(
                loop.create_task(self._watch(receive)))).cancel
        stream = None
        try:
            if not self.head_written:
                await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            chunks = self.chunks
            if isinstance(chunks, Paced) and chunks.drain is not None and chunks.clock.realtime:
                stream = self._on_pacer(chunks, send, hooks.chunk_writer(scope) if hooks is not None else None)
                self._waiting = stream.done
                await stream.done
                self._waiting = None
                if chunks.on_end is not None and not stream.stopped and (ending := chunks.on_end()) is not None:
                    await ending            # (a stream a shutdown ended is not kept)
            else:
                async for chunk in chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self.finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not self.left:
                raise
            if self._task_cancelled:
                self._task.uncancel()   # our own cancellation: the client left, nothing to answer
        finally:
            self.finished = True
            if stream is not None:
                stream.close()
            forget()
            for watching in watcher:
                watching.cancel()

    @staticmethod
    def _on_pacer(paced: Paced, send, direct: Callable[[bytes, bool], bool] | None) -> PacedStream:
        """Run `paced` on its app's shared timer: its first step now, the rest when due. Chunks go
        `direct` to the connection when it can (llmsim.server.connection), else through `send`.
        The first step's chunk leaves with the headers (and, for an instant stream, the end)
        in one write; a later step's leaves at once, before the timer renders the next
        stream's, so a client's token waits for no other stream's."""
        clock, tap = paced.clock, paced.on_chunk
        on_timer = False

        def write(batch):
            chunk = sse_chunk(batch, clock)
            if tap is not None:
                tap(batch, chunk)
            if direct is not None and direct(chunk, on_timer):
                return None
            return send_now(send, {"type": "http.response.body", "body": chunk, "more_body": True})
        stream = PacedStream(paced.frames, paced.start, write, paced.keepalive, paced.lateness, clock)
        following = stream.step(clock.now())
        on_timer = True
        if following is not None:
            paced.drain.pacers.get().add(stream, following)
        elif not stream.done.done():        # its first write waits for the client: it resumes
            stream.pacer = paced.drain.pacers.get()     # on the app's pacer (`PacedStream._after`)
        return stream

    async def _watch(self, receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._left()

    def _left(self) -> None:
        """The client left: stop waiting for the stream (a paced one's end), or the task."""
        if not self.finished:
            self.left = True
            chunks = self.chunks
            if isinstance(chunks, Paced) and chunks.on_left is not None:
                chunks.on_left(chunks.clock.now() - chunks.start)
            if self._waiting is not None:
                self._waiting.cancel()
            elif self._task is not None:
                self._task_cancelled = True
                self._task.cancel()


async def ws_send(websocket, paced: Paced) -> None:
    """A paced SSE stream over a WebSocket: each event's data (`sse.payload`, its frame without
    the `event:`/`data:` envelope) as one text message, at the same deadlines as over HTTP."""
    async for batch in due_lists(paced.frames, paced.start, paced.clock, None, paced.lateness, "begun",
                                 paced.drain):
        for frame in batch:
            await websocket.send_text(payload(frame).decode())
