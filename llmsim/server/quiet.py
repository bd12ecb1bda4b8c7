"""uvicorn's server without its 0.1 s tick: an idle process sleeps until a connection or a signal.

uvicorn's `Server.main_loop` wakes ten times a second to refresh the `date` header and to see
whether it should exit; a fleet of 16 idle backends spent most of its CPU there.
`QuietServer` waits instead for `should_exit` to be set (a signal, or code that sets it: the
set wakes the loop at once, from a signal handler too), and its `ServerState` makes the
server's own headers (`date`, then uvicorn's configured ones) when a response asks for them:
one list per second, made by the first response of a second and dropped by a timer when the
second ends, so `date` is right to the second, the list stays the same object within it
(llmsim.server.connection keys on it), and reading it is a plain attribute read.
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
    """`default_headers` made when first read in a second and kept, as a plain attribute (no
    call per read), until that second ends: a timer armed by the read drops it, so a busy
    server makes them once a second and an idle one not at all. `later(delay, callback)`
    arms the timer (None: the running loop's). A value uvicorn's tick assigns (only when it
    ticks: see `QuietServer`) stands until then."""

    def __init__(self, config: uvicorn.Config, clock=time.time, later=None):
        self._config = config
        self._clock = clock
        self._later = later or _call_later
        super().__init__()
        del self.default_headers        # uvicorn's empty list: made when first read

    def __getattr__(self, name: str):
        if name != "default_headers":
            raise AttributeError(name)
        now = self._clock()
        second = int(now)
        config = self._config
        headers = list(getattr(config, "encoded_headers", ()))     # set when the config loads
        if config.date_header:
            headers.insert(0, (b"date", formatdate(second, usegmt=True).encode()))
        self.default_headers = headers
        self._later(second + 1 - now, self._second_ended)
        return headers

    def _second_ended(self) -> None:
        self.__dict__.pop("default_headers", None)


def _call_later(delay: float, callback) -> None:
    try:
        asyncio.get_running_loop().call_later(delay, callback)
    except RuntimeError:        # no loop to end the second: made again when next read
        callback()


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
