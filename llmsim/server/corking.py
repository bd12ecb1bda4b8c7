"""uvicorn's httptools protocol with its writes coalesced: one socket write per loop step.

uvicorn writes a response's headers as soon as the app sends `http.response.start`, then
each body chunk, then (chunked streams) the terminating chunk: two writes for a JSON answer,
three for an instant stream, each a system call that on loopback also pays for delivering
the bytes. `CorkedTransport` holds what is written during one step of the event loop and
writes it as one buffer right after (a user-space TCP_CORK), so a whole answer usually
leaves in one write, and a paced stream's event still leaves in the step it is due.

`llmsim serve` passes `CorkedHttpToolsProtocol` to uvicorn (`http=`). Each request's scope
also carries a weak reference to its connection, through which a paced stream writes its
chunks and hears that its client left (llmsim.server.connection).
"""
from __future__ import annotations

import asyncio
import time
import weakref
from typing import Callable

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llmsim.server.connection import HOOKED, HOOKS, PROTOCOL
from llmsim.server.context import RECEIVED_AT
from llmsim.server.deadlines import HeadTimer
from llmsim.server.requestcycle import METHODS, Cycle, request_target
from llmsim.server.starting import Starter


class Flusher:
    """The corked transports of one event loop with something to send; one callback a loop
    step sends it all (with a thousand paced streams, one callback instead of a thousand)."""
    __slots__ = ("loop", "dirty")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.dirty: list[CorkedTransport] = []

    def note(self, transport: "CorkedTransport") -> None:
        if not self.dirty:
            self.loop.call_soon(self.flush)
        self.dirty.append(transport)

    def flush(self) -> None:
        dirty, self.dirty = self.dirty, []
        for transport in dirty:
            transport._flush()


_PER_LOOP: dict[tuple[type, asyncio.AbstractEventLoop], object] = {}


def for_loop(kind: type, loop: asyncio.AbstractEventLoop):
    """The one `kind(loop)` of an event loop (a `Flusher`, a `llmsim.server.starting.Starter`); those
    of closed loops are dropped."""
    found = _PER_LOOP.get((kind, loop))
    if found is None:
        for old in [key for key in _PER_LOOP if key[1].is_closed()]:
            del _PER_LOOP[old]
        found = _PER_LOOP[kind, loop] = kind(loop)
    return found


class CorkedTransport:
    """A transport whose `write`s within one loop step go out together; everything else is
    the wrapped transport's (closing flushes first)."""
    __slots__ = ("_transport", "_flusher", "_pending", "is_closing")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self.is_closing = transport.is_closing      # asked after every response: not through __getattr__
        self._flusher = for_loop(Flusher, loop)
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._flusher.note(self)
        self._pending.append(data)

    def _flush(self) -> None:
        pending = self._pending
        if pending:
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def write_now(self, data: bytes) -> None:
        """Write `data` at once, after whatever this step corked (in the same write)."""
        if self._pending:
            self._pending.append(data)
            self._flush()
        elif not self._transport.is_closing():
            self._transport.write(data)

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def uncorked(self) -> asyncio.Transport:
        """The wrapped transport, with everything written so far sent."""
        self._flush()
        return self._transport

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class CorkedHttpToolsProtocol(HeadTimer, HttpToolsProtocol):
    def _start_asgi_task(self, cycle, app) -> None:
        """After the loop's next read of sockets, at once until it first waits (llmsim.server.starting)."""
        eager = self.eager
        self.starter.add(cycle.run_asgi, app, self.tasks, eager is not None and eager(cycle.scope))

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.ref = weakref.ref(self)
        self.on_lost: Callable[[], None] | None = None     # see llmsim.server.connection.watch_disconnect
        self.server_lines: tuple[list, bytes] = ([], b"")    # see llmsim.server.connection.respond
        self.starter = for_loop(Starter, self.loop)
        self.eager = getattr(self.app, "eager", None)
        body_timeout = getattr(self.app, "body_timeout_s", None)     # (llmsim.server.requestcycle)
        self.body_due = None if body_timeout is None else (body_timeout, self.app.body_late)
        super().connection_made(CorkedTransport(transport, self.loop))  # type: ignore[arg-type]
        # what every request's scope on this connection starts with (uvicorn's keys, in its order)
        self.scope_base = {"type": "http", "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
                           "http_version": "1.1", "server": self.server, "client": self.client,
                           "scheme": self.scheme, "root_path": self.root_path}

    # -- a request's head: uvicorn's, in fewer steps -------------------------------------------
    # What uvicorn does as a request's head is parsed, with the same scope and cycle, but its
    # steps folded into one call each: a request's path parsed once per distinct target, and
    # its cycle made without keyword arguments (llmsim.server.requestcycle).
    def on_message_begin(self) -> None:
        """Stamp the request with when it arrived (`Clock.now`'s base), before it may wait
        behind others for the loop: its simulated latency counts from here."""
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.scope = {**self.scope_base, "headers": self.headers,  # type: ignore[typeddict-item]
                      "state": self.app_state.copy(),
                      "extensions": {RECEIVED_AT: time.monotonic(), PROTOCOL: self.ref, HOOKS: HOOKED}}

    def on_headers_complete(self) -> None:
        if self.head_timer is not None:     # the connection's first head (llmsim.server.deadlines)
            self.head_arrived()
        parser, scope = self.parser, self.scope
        method = parser.get_method()
        scope["method"] = METHODS.get(method) or method.decode("ascii")
        http_version = parser.get_http_version()
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
        scope["path"], scope["raw_path"], scope["query_string"] = request_target(self.url, self.root_path)
        app = self.app
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        existing = self.cycle
        self.cycle = Cycle(scope, self.transport, self.flow, self.server_state.default_headers,
                           self.access_log, self.expect_100_continue,
                           http_version != "1.0" and parser.should_keep_alive(),
                           self.on_response_complete, self.body_due)
        if existing is None or existing.response_complete:
            self._start_asgi_task(self.cycle, app)
        else:                                   # pipelined: started when the one before ends
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, app))

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete or (self.parser.should_upgrade() and self._should_upgrade()):
            return          # None: a WebSocket upgrade (no cycle), handed on when the head is read
        cycle.body += body
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete or (self.parser.should_upgrade() and self._should_upgrade()):
            return          # None: a WebSocket upgrade (no cycle), handed on when the head is read
        cycle.more_body = False
        cycle.message_event.set()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._stop_keep_alive()
        callback, self.on_lost = self.on_lost, None
        if callback is not None:
            callback()

    def handle_websocket_upgrade(self) -> None:
        """A WebSocket gets the plain transport: its frames are written as the library wants."""
        self._stop_keep_alive()
        self.transport = self.transport.uncorked()
        super().handle_websocket_upgrade()

    # -- keep-alive: one timer per idle spell, not one per response ----------------------------
    # uvicorn arms a timer after every response and cancels it when the next request's bytes
    # arrive (in every `data_received`): under load a timer made, started and stopped per
    # request. Here the timer stays armed while requests come; when it fires it closes the
    # connection only if it has been idle for the whole timeout, and otherwise waits for the
    # rest of it. (why it is kept: docs/performance.md#what-is-kept-for-speed)
    idle_since: float | None = None     # loop time the last response ended; None while busy

    def _unset_keepalive_if_required(self) -> None:
        self.idle_since = None

    def on_response_complete(self) -> None:
        """uvicorn's, but arming the keep-alive timer only when none is armed."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self.idle_since = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._keep_alive_due)

    def _keep_alive_due(self) -> None:
        self.timeout_keep_alive_task = None
        if self.idle_since is None:             # busy: its response arms the timer again
            return
        left = self.idle_since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self._keep_alive_due)
        else:
            self.timeout_keep_alive_handler()

    def _stop_keep_alive(self) -> None:
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
