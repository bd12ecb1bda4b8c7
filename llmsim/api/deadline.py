"""`BodyDeadline`: a request's `receive` whose body must all arrive within a time limit.

A client that sends its headers and then stalls (or dribbles) its body would hold a request,
and the memory of what it has sent, for as long as it likes. Wrapped in a `BodyDeadline`
(llmsim.api.front, for requests with a body), `receive` raises `RequestTimeoutError` once
`body_timeout_s` has passed since the request began with the body still incomplete: the
client gets 408 in the provider's envelope, and `connection: close` ends the connection.
A body that has already arrived (the usual case) is handed over without a timer or a task.
"""
from __future__ import annotations

import asyncio

from llmsim.errors import RequestTimeoutError


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
        """The rest of `coro` (waiting on `waiting`), in a task given until the deadline."""
        loop = asyncio.get_running_loop()
        rest = loop.create_task(_finish(coro, waiting))
        done, _ = await asyncio.wait((rest,), timeout=max(0.0, self.deadline - loop.time()))
        if not done:
            rest.cancel()
            raise RequestTimeoutError(
                f"The request body did not all arrive within {self.timeout:g} seconds of the request's "
                "start (setting body_timeout_s).")
        return rest.result()


async def _finish(coro, waiting):
    """Drive `coro`, which last yielded `waiting`, to its end (a task's way)."""
    return await _Rest(coro, waiting)


class _Rest:
    __slots__ = ("coro", "waiting")

    def __init__(self, coro, waiting):
        self.coro, self.waiting = coro, waiting

    def __await__(self):
        coro, waiting = self.coro, self.waiting
        while True:
            try:
                yield waiting
            except BaseException as exc:        # a cancellation: into the coroutine, where it waits
                try:
                    waiting = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                waiting = coro.send(None)
            except StopIteration as stop:
                return stop.value
