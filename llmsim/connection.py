"""What a request served by `llmsim serve`'s protocol (llmsim.corking) can reach of its
connection, through the weak reference in its scope: a paced stream writes its chunks
straight to it (`chunk_writer`: with a thousand streams the ASGI send chain, three
middlewares and uvicorn's checks, was a tenth of each event's cost) and hears that its
client left (`watch_disconnect`: no task waiting on `receive` per stream).

Kept apart from the protocol so that importing the app needs no httptools.
"""
from __future__ import annotations

from typing import Callable

PROTOCOL = "llmsim.protocol"    # scope["extensions"] key: (a weak reference to) the connection


def _serving(scope):
    """The protocol and request cycle serving `scope` (None, None: not llmsim.corking's)."""
    extensions = scope.get("extensions")
    ref = extensions.get(PROTOCOL) if extensions else None
    protocol = ref() if ref is not None else None
    cycle = getattr(protocol, "cycle", None)
    if cycle is None or cycle.scope.get("extensions") is not extensions:
        return None, None
    return protocol, cycle


def watch_disconnect(scope, callback: Callable[[], None]) -> Callable[[], None] | None:
    """Have `callback()` called if the client of this request's connection leaves, without a
    task waiting on `receive` for it. Returns the function that calls it off (call it when
    the response ends: until then the connection holds the callback); None when the request
    did not come through llmsim.corking's protocol."""
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
    rather than with the rest of the loop step's writes (llmsim.corking). Returns False,
    writing nothing, when the ASGI `send` must do it: the client reads slowly (flow control
    waits), left, or the response ended. None when the request did not come through
    llmsim.corking's protocol."""
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
