"""The one ASGI middleware that watches every API request and WebSocket connection.

Per HTTP request it opens an `Exchange` (visible to handlers through `stats.current()`),
adds the ground-truth headers when the response starts, and when the request ends feeds
`Stats`, the trace file and the access log (each only when switched on). As a request
starts and as it ends, paced streams write what fell due meanwhile, and the loop's clock is
read, which keeps a burst of requests from delaying every timer (llmsim.pacer.catch_up).

Headers on every API answer: `x-request-id` (the client's, else a new `req_...`) and
`openai-processing-ms` (measured time until the headers). On planned answers, the intended
values: `x-llmsim-ttft-ms`, `x-llmsim-duration-ms` and `x-llmsim-tokens` (visible
completion tokens). Streams send headers before the body, so they carry them too.
"""
from __future__ import annotations

import asyncio
import random
import time

from llmsim.collector import Collector
from llmsim.pacer import PACERS
from llmsim.requestlog import AccessLog, Trace
from llmsim.stats import CURRENT, WEBSOCKET, Exchange, Stats, output_tokens

ADMIN_PATHS = frozenset({"/metrics", "/health"})
ADMIN_PREFIX = "/llmsim/"
API_PREFIXES = ("/openai/v1/", "/v1/")
ENDPOINTS = {"responses": "responses", "chat": "chat", "models": "models",
             "conversations": "conversations", "realtime": "realtime"}
REQUEST_ID = b"x-request-id"
PROCESSING_MS = b"openai-processing-ms"
MAX_ID = 200            # a client's request id is echoed up to this many bytes
MAX_PATHS = 256         # endpoint names remembered per path (beyond: worked out each time)


def endpoint_of(path: str) -> str:
    for prefix in API_PREFIXES:
        if path.startswith(prefix):
            return ENDPOINTS.get(path[len(prefix):].split("/", 1)[0], "other")
    return "other"


def _ms(seconds: float) -> bytes:
    return b"%.3f" % (seconds * 1000.0)


class Observer:
    def __init__(self, app, sim):
        self.app = app
        self.stats: Stats = sim.stats
        self.counting = self.stats.enabled
        settings = sim.settings
        writers = []
        if settings.trace:
            writers.append(Trace(settings.trace))
        if settings.log_format and settings.log_format != "off":
            writers.append(AccessLog(settings.log_format))
        self.writers = self.stats.writers = tuple(writers)
        self._rng = random.Random()
        self._endpoints: dict[str, str] = {}
        self.in_flight = 0
        self.collector = Collector(schedule=lambda collect: asyncio.get_running_loop().call_soon(collect))

    def endpoint(self, path: str) -> str:
        name = self._endpoints.get(path)
        if name is None:
            name = endpoint_of(path)
            if len(self._endpoints) < MAX_PATHS:
                self._endpoints[path] = name
        return name

    def request_id(self, scope) -> str:
        for name, value in scope["headers"]:
            if name == REQUEST_ID and value:
                return value[:MAX_ID].decode("latin-1")
        return f"req_{self._rng.getrandbits(128):032x}"

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        path = scope.get("path", "")
        if kind == "http" and not (path in ADMIN_PATHS or path.startswith(ADMIN_PREFIX)):
            await self._http(scope, receive, send, path)
        elif kind == "websocket":
            await self._websocket(scope, receive, send, path)
        else:
            if kind != "lifespan":
                await self.app(scope, receive, send)
                return
            self.stats.serving()
            self.collector.serving(time.perf_counter())
            try:
                await self.app(scope, receive, send)
            finally:
                self.collector.stopped()
                self.stats.stopped()

    async def _http(self, scope, receive, send, path: str):
        PACERS.catch_up()
        ex = Exchange(self.request_id(scope), "http", scope["method"], path, self.endpoint(path),
                      self.stats)
        token = CURRENT.set(ex)
        self.in_flight += 1
        if self.counting:
            self.stats.request_started()

        def observed_send(message):     # returns send's awaitable: no coroutine of its own
            if message["type"] == "http.response.start":
                ex.status = message["status"]
                headers = message["headers"] = [
                    *message.get("headers", ()), (REQUEST_ID, ex.id.encode("latin-1")),
                    (PROCESSING_MS, b"%d" % int((time.perf_counter() - ex.start) * 1000))]
                plan = ex.plan
                if plan is not None:
                    headers += ((b"x-llmsim-ttft-ms", _ms(plan.first_token_at)),
                                (b"x-llmsim-duration-ms", _ms(plan.end_at)),
                                (b"x-llmsim-tokens", b"%d" % output_tokens(plan.usage)[0]))
            return send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            CURRENT.reset(token)
            now = time.perf_counter()
            self.in_flight -= 1
            self.collector.request_ended(now, self.in_flight)
            if self.counting:
                self.stats.request_finished(ex, now - ex.start)
            if self.writers:
                end = ex.wall + (now - ex.start)
                for writer in self.writers:
                    writer.write(ex, end)
            # Timers the request armed keep a copy of its context (so this exchange) until
            # they would have fired, cancelled or not: let its plan go now.
            ex.plan = None
            PACERS.catch_up()

    async def _websocket(self, scope, receive, send, path: str):
        ex = Exchange(self.request_id(scope), WEBSOCKET, "WS", path, "websocket", self.stats)
        token = CURRENT.set(ex)
        stats = self.stats

        async def observed_send(message):
            if message["type"] == "websocket.accept" and not ex.status:
                ex.status = 101
                if self.counting:
                    stats.ws_opened()
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            CURRENT.reset(token)
            if ex.status and self.counting:
                stats.ws_closed()
