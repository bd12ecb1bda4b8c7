"""A request's cycle as `llmsim serve`'s protocol (llmsim.server.corking) makes it: uvicorn's, with
less work per request as its head is parsed (the scope in one display, each distinct path
parsed once, a body that has all arrived handed over without waiting on an event);
why it is kept: docs/performance.md#what-is-kept-for-speed.

A body still arriving is waited for only until the app's body deadline (`body_timeout_s`, from
the request's arrival): then `receive` raises the app's own error for it (llmsim.api.deadline,
`--server plain`'s `BodyDeadline`), so a body that has all arrived costs no deadline at all."""
from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from typing import Callable

import httptools
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from llmsim.server.context import RECEIVED_AT


class Cycle(RequestResponseCycle):
    """uvicorn's request cycle, made without keyword arguments, whose `receive` hands over a
    body that has all arrived without waiting for the event that says so, and waits for one
    still arriving only until `body_due` (timeout, error): (seconds, the app's exception for
    a late body, given them); None: for as long as it takes."""
    body_timer: asyncio.TimerHandle | None = None    # armed by the first wait for the body
    body_late = False                                # the deadline passed with the body incomplete
    # uvicorn's initial values, as class attributes: not set again for every request
    # (docs/performance.md#what-is-kept-for-speed, the request cycle)
    logger = logging.getLogger("uvicorn.error")
    access_logger = logging.getLogger("uvicorn.access")
    disconnected = False
    more_body = True
    response_started = False
    response_complete = False
    chunked_encoding: bool | None = None
    expected_content_length = 0
    delivered = False           # the whole body was handed over at once

    def __init__(self, scope, transport, flow, default_headers, access_log: bool,
                 expect_100_continue: bool, keep_alive: bool, on_response: Callable[[], None],
                 body_due: tuple[float, Callable[[float], Exception]] | None):
        self.scope = scope
        self.body_due = body_due
        self.transport = transport
        self.flow = flow
        self.access_log = access_log
        self.default_headers = default_headers
        self.message_event = asyncio.Event()
        self.on_response = on_response
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self.body = bytearray()

    async def receive(self):
        if self.more_body or self.delivered or self.waiting_for_100_continue or self.disconnected \
                or self.response_complete:
            if self.body_due is not None and self.more_body:
                return await self._receive_in_time()
            return await RequestResponseCycle.receive(self)
        self.delivered = True           # a later call waits for the client to leave
        if self.flow.read_paused:
            self.flow.resume_reading()
        self.message_event.clear()
        body, self.body = self.body, bytearray()
        return {"type": "http.request", "body": bytes(body), "more_body": False}

    async def _receive_in_time(self):
        """uvicorn's `receive`, raising the app's error for a late body once `body_due` has
        passed since the request arrived with the body still incomplete."""
        timeout, late = self.body_due
        if self.body_late:
            raise late(timeout)
        if self.body_timer is None:
            due = self.scope["extensions"][RECEIVED_AT] + timeout - time.monotonic()
            self.body_timer = asyncio.get_running_loop().call_later(due, self._body_expired)
        message = await RequestResponseCycle.receive(self)
        if self.body_late and message.get("more_body"):
            raise late(timeout)
        if not message.get("more_body"):
            self.body_timer.cancel()
        return message

    def _body_expired(self) -> None:
        if self.more_body and not (self.disconnected or self.response_complete):
            self.body_late = True
            self.message_event.set()        # wakes the wait in `receive`


METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")}
_TARGETS: dict[bytes, tuple[str, bytes, bytes]] = {}
MAX_TARGETS = 1024


def request_target(url: bytes, root_path: str) -> tuple[str, bytes, bytes]:
    """(path, raw_path, query_string) of a request target, as uvicorn puts them in a scope;
    remembered for the first `MAX_TARGETS` targets (under a root path, not at all)."""
    if not root_path:
        found = _TARGETS.get(url)
        if found is not None:
            return found
    parsed = httptools.parse_url(url)
    raw_path = parsed.path
    path = raw_path.decode("ascii")
    if "%" in path:
        path = urllib.parse.unquote(path)
    target = (root_path + path, root_path.encode("ascii") + raw_path, parsed.query or b"")
    if not root_path and len(_TARGETS) < MAX_TARGETS:
        _TARGETS[url] = target
    return target
