"""`BodyDeadline`: a request's `receive` whose body must all arrive within a time limit.

A client that sends its headers and then stalls (or dribbles) its body would hold a request,
and the memory of what it has sent, for as long as it likes. Wrapped in a `BodyDeadline`
(llmsim.api.front, for requests with a body), `receive` raises `RequestTimeoutError` once
`body_timeout_s` has passed since the request began with the body still incomplete: the
client gets 408 in the provider's envelope, and `connection: close` ends the connection.
A body that has already arrived (the usual case) is handed over without a timer or a task.
The tuned server keeps the same deadline in its own request cycle (llmsim.server.requestcycle,
raising `late`'s error), so only `--server plain` wraps `receive` here.
"""
from __future__ import annotations

import asyncio

from llmsim.errors import RequestTimeoutError


def late(timeout: float) -> RequestTimeoutError:
    """The error of a body not all arrived `timeout` seconds after its request began."""
    return RequestTimeoutError(
        f"The request body did not all arrive within {timeout:g} seconds of the request's "
        "start (setting body_timeout_s).")


class BodyDeadline:
    __slots__ = ("receive", "timeout", "deadline", "done")

    def __init__(self, receive, timeout: float):
        self.receive, self.timeout = receive, timeout
        self.deadline = asyncio.get_running_loop().time() + timeout
        self.done = False           # the body has all arrived (or the client left)

    async def __call__(self) -> dict:
        if self.done:
            return await self.receive()
        coro = self.receive()
        try:
            waiting = coro.send(None)       # at once, when what it waits for is already there
        except StopIteration as stop:
            message = stop.value
        else:
            message = await self._within(coro, waiting)
        if message["type"] != "http.request" or not message.get("more_body"):
            self.done = True
        return message

    async def _within(self, coro, waiting) -> dict:
        """The rest of `coro` (waiting on `waiting`), given until the deadline: then the future
        it waits on is cancelled. A timer, not a task or `asyncio.timeout`: the request may
        still be running outside a task (llmsim.server.starting)."""
        rest = _Rest(coro, waiting)
        timer = asyncio.get_running_loop().call_at(self.deadline, rest.expire)
        try:
            return await rest
        except asyncio.CancelledError:
            if not rest.expired:
                raise
            raise late(self.timeout) from None
        finally:
            timer.cancel()


class _Rest:
    """Drives a coroutine that last yielded `waiting` to its end, as a task would."""
    __slots__ = ("coro", "waiting", "expired")

    def __init__(self, coro, waiting):
        self.coro, self.waiting, self.expired = coro, waiting, False

    def expire(self) -> None:
        self.expired = True
        if isinstance(self.waiting, asyncio.Future):
            self.waiting.cancel()

    def __await__(self):
        coro = self.coro
        while True:
            if self.expired and not isinstance(self.waiting, asyncio.Future):
                coro.close()
                raise asyncio.CancelledError
            try:
                yield self.waiting
            except BaseException as exc:        # a cancellation: into the coroutine, where it waits
                try:
                    self.waiting = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                self.waiting = coro.send(None)
            except StopIteration as stop:
                return stop.value
