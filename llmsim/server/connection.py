"""What a request served by `llmsim serve`'s protocol (llmsim.server.corking) can reach of its
connection, through the weak reference in its scope: a paced stream writes its chunks
straight to it (`chunk_writer`: past the ASGI send chain, the middlewares and uvicorn's
checks, which every event of every stream would otherwise pay) and hears that its
client left (`watch_disconnect`: no task waiting on `receive` per stream); a response's
head, and a JSON answer whole, go out in one write (`respond`).

Kept apart from the protocol so that importing the app needs no httptools.
"""
from __future__ import annotations

import http
from typing import Callable

PROTOCOL = "llmsim.protocol"    # scope["extensions"] key: (a weak reference to) the connection
HOOKS = "llmsim.connection"     # scope["extensions"] key: `Hooks` (llmsim.pacing.transport's CONNECTION)


def _serving(scope):
    """The protocol and request cycle serving `scope` (None, None: the request has ended).
    Called through `Hooks`, which only the protocol puts in a scope's extensions, beside its
    reference."""
    extensions = scope["extensions"]
    protocol = extensions[PROTOCOL]()
    cycle = protocol.cycle if protocol is not None else None
    if cycle is None or cycle.scope["extensions"] is not extensions:
        return None, None
    return protocol, cycle


def watch_disconnect(scope, callback: Callable[[], None]) -> Callable[[], None] | None:
    """Have `callback()` called if the client of this request's connection leaves, without a
    task waiting on `receive` for it. Returns the function that calls it off (call it when
    the response ends: until then the connection holds the callback); None when the request
    did not come through llmsim.server.corking's protocol."""
    protocol, _ = _serving(scope)
    if protocol is None:
        return None
    protocol.on_lost = callback

    def forget() -> None:
        if protocol.on_lost is callback:
            protocol.on_lost = None
    return forget


def chunk_writer(scope) -> Callable[[bytes, bool], bool] | None:
    """For a chunked response whose headers are out: write one body chunk straight to its
    connection, as uvicorn's `send` would, without the ASGI send chain of every middleware
    (which only watches a response start and end). With `at_once`, the chunk leaves now
    rather than with the rest of the loop step's writes (llmsim.server.corking). Returns False,
    writing nothing, when the ASGI `send` must do it: the client reads slowly (flow control
    waits), left, or the response ended. None when the request did not come through
    llmsim.server.corking's protocol."""
    _, cycle = _serving(scope)
    if cycle is None or not cycle.response_started or not cycle.chunked_encoding:
        return None
    transport, flow = cycle.transport, cycle.flow
    write_now = getattr(transport, "write_now", transport.write)

    def write(chunk: bytes, at_once: bool = False) -> bool:
        if flow.write_paused or cycle.disconnected or cycle.response_complete:
            return False
        (write_now if at_once else transport.write)(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        return True
    return write


def respond(scope, status: int, headers: list, body: bytes | None) -> bool:
    """Write a response's status line and headers (after the server's own, `date` and
    `server`) to the connection, as uvicorn's `send` would for `http.response.start` but
    without checking each header against its patterns again (the caller's are llmsim's own),
    and with them, in the same write, a whole body (`body`: the request cycle ends) or
    nothing (None: a chunked body follows, through `send` or `chunk_writer`). Returns False,
    writing nothing, when the ASGI `send` must do it: the request did not come through
    llmsim.server.corking's protocol, the response started, the client left or reads slowly.
    (`_serving`, inline: one call per response)"""
    extensions = scope.get("extensions")
    ref = extensions.get(PROTOCOL) if extensions else None
    protocol = ref() if ref is not None else None
    cycle = protocol.cycle if protocol is not None else None
    if cycle is None or cycle.scope.get("extensions") is not extensions \
            or cycle.response_started or cycle.disconnected or cycle.flow.write_paused:
        return False
    head = [_status_line(status), _server_lines(protocol, cycle.default_headers)]
    if headers:     # "name: value" lines joined in C, cheaper than formatting each
        head += (_lines(map(_line, headers)), b"\r\n")
    keep_alive = cycle.keep_alive
    if not keep_alive:
        head.append(b"connection: close\r\n")
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    if body is None:
        cycle.chunked_encoding = True
        cycle.expected_content_length = 0
        head.append(b"transfer-encoding: chunked\r\n\r\n")
        cycle.transport.write(b"".join(head))
        return True
    head += (b"\r\n", body)
    cycle.response_complete = True
    cycle.transport.write(b"".join(head))
    cycle.message_event.set()
    if not keep_alive:
        cycle.transport.close()
    cycle.on_response()
    return True


_line, _lines = b": ".join, b"\r\n".join


def _server_lines(protocol, headers: list) -> bytes:
    """The server's own header lines (`date`, `server`): joined once per list and connection
    (uvicorn makes a new list when the date changes, once a second)."""
    known, lines = protocol.server_lines
    if headers is not known:
        lines = b"".join([b"%s: %s\r\n" % pair for pair in headers])
        protocol.server_lines = (headers, lines)
    return lines


_STATUS_LINES: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            phrase = http.HTTPStatus(status).phrase.encode()
        except ValueError:
            phrase = b""
        line = _STATUS_LINES[status] = b"HTTP/1.1 %d %s\r\n" % (status, phrase)
    return line


class Hooks:
    """What llmsim.pacing.transport may use of a connection (its `ConnectionHooks`), installed
    by the protocol in each request's scope: pacing never imports the server."""
    chunk_writer = staticmethod(chunk_writer)
    watch_disconnect = staticmethod(watch_disconnect)


HOOKED = Hooks()
