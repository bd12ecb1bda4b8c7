"""uvicorn's server without its 0.1 s tick: an idle process sleeps until a connection or a signal.

uvicorn's `Server.main_loop` wakes ten times a second to refresh the `date` header and to see
whether it should exit; a fleet of 16 idle backends spent most of its CPU there.
`QuietServer` waits instead for `should_exit` to be set (a signal, or code that sets it: the
set wakes the loop at once, from a signal handler too), and its `ServerState` makes the
server's own headers (`date`, then uvicorn's configured ones) when a response asks for them:
one list per second, rebuilt by the first response of a new second, so `date` is right to the
second and the list stays the same object within it (llmsim.server.connection keys on it).
With `--limit-max-requests` or a notify callback (uvicorn's process manager) it ticks as uvicorn.
The story: docs/internals.md#serverquiet.
"""
from __future__ import annotations

import asyncio
import time
from email.utils import formatdate

import uvicorn
from uvicorn.server import ServerState


class DatedState(ServerState):
    """`default_headers` made when read, once a second; what uvicorn's tick assigns is ignored."""

    def __init__(self, config: uvicorn.Config, clock=time.time):
        self._config = config
        self._clock = clock
        self._second = -1
        self._headers: list[tuple[bytes, bytes]] = []
        super().__init__()

    @property
    def default_headers(self) -> list[tuple[bytes, bytes]]:
        second = int(self._clock())
        if second != self._second:
            self._second = second
            config = self._config
            headers = list(getattr(config, "encoded_headers", ()))     # set when the config loads
            if config.date_header:
                headers.insert(0, (b"date", formatdate(second, usegmt=True).encode()))
            self._headers = headers
        return self._headers

    @default_headers.setter
    def default_headers(self, value) -> None:     # uvicorn's ServerState.__init__ and on_tick
        pass


class QuietServer(uvicorn.Server):
    """uvicorn's `Server`, asleep while idle (see the module's docstring)."""

    _wake = None        # while main_loop waits: wakes it, from any thread or a signal handler
    _should_exit = False

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self.server_state = DatedState(config)

    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        wake = self._wake
        if value and wake is not None:
            wake()

    async def main_loop(self) -> None:
        if self.config.callback_notify is not None or self.config.limit_max_requests is not None:
            await super().main_loop()
            return
        loop = asyncio.get_running_loop()
        asked = asyncio.Event()
        self._wake = lambda: loop.call_soon_threadsafe(asked.set)
        try:
            while not self.should_exit:
                await asked.wait()
                asked.clear()
        finally:
            self._wake = None
