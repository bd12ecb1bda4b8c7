"""`--header-timeout`: a connection whose request head has not all arrived within the time limit
is closed.

uvicorn closes a connection idle between requests (`timeout_keep_alive`) but waits forever
for the head of the first: a client that connects and sends nothing, or dribbles its head a
byte at a time, holds a connection (and its memory) for as long as it likes. `HeadDeadline`,
mixed into the server's HTTP protocol (the tuned server's, and stock uvicorn's for `--server
plain`), watches only what asyncio's Protocol interface shows it (`connection_made`,
`data_received`, `connection_lost`): from the moment a connection opens, its first request
head (up to the blank line that ends it) must arrive within the app's `header_timeout_s`,
or the connection is closed, with no answer (no request to answer yet). A later head on a
kept-alive connection is not timed here: the wait before it is uvicorn's keep-alive timeout.
`llmsim serve`'s own protocol (llmsim.server.corking) uses `HeadTimer` instead: its parser says
when a head is complete (`on_headers_complete`), so no `data_received` of its is wrapped.
"""
from __future__ import annotations

import asyncio

END_OF_HEAD = b"\r\n\r\n"


class HeadTimer:
    """Mixin for an asyncio HTTP protocol made by uvicorn (`config=` among its arguments) that
    calls `head_arrived()` when a request head is complete: the timer from `connection_made`
    until the first one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        config = kwargs.get("config") or (args[0] if args else None)
        self.head_timeout = getattr(getattr(config, "loaded_app", None), "header_timeout_s", None)
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if self.head_timeout is not None:
            self.head_timer = asyncio.get_running_loop().call_later(self.head_timeout, self._head_late, transport)

    def head_arrived(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def connection_lost(self, exc) -> None:
        self.head_arrived()
        super().connection_lost(exc)

    def _head_late(self, transport) -> None:
        self.head_timer = None
        if not transport.is_closing():
            transport.close()


class HeadDeadline(HeadTimer):
    """`HeadTimer` for a protocol that does not say when a head is complete: every read is
    looked at for the blank line that ends the first head."""
    head_tail = b""         # the last bytes of the head so far (the blank line may straddle reads)

    def data_received(self, data: bytes) -> None:
        timer = self.head_timer
        if timer is not None:
            seen = self.head_tail + data
            if END_OF_HEAD in seen:
                timer.cancel()
                self.head_timer, self.head_tail = None, b""
            else:
                self.head_tail = seen[-3:]
        super().data_received(data)


def plain_protocol() -> type:
    """`--server plain`'s HTTP protocol: uvicorn's own (httptools where installed, else h11) with
    the head's deadline."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Stock
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol as Stock
    return type(f"Timed{Stock.__name__}", (HeadDeadline, Stock), {"__module__": __name__})


PlainProtocol = plain_protocol()    # uvicorn's `http=` setting for `--server plain`
