"""What llmsim records of every API request and WebSocket connection (llmsim.api.front calls it).

Per HTTP request it opens an `Exchange` (visible to handlers through `stats.current()`),
names the ground-truth headers when the response starts, and when the request ends feeds
`Stats`, the trace file and the access log (each only when switched on). As a request
starts and as it ends, paced streams write what fell due meanwhile, and the loop's clock is
read, which keeps a burst of requests from delaying every timer (llmsim.pacing.pacer.catch_up).

Headers on every API answer: `x-request-id` (the client's, else a new `req_...`) and
`openai-processing-ms` (measured time until the headers). On planned answers, the intended
values: `x-llmsim-ttft-ms`, `x-llmsim-duration-ms` and `x-llmsim-tokens` (visible
completion tokens). Streams send headers before the body, so they carry them too.
"""
from __future__ import annotations

import random
import time
from time import perf_counter
from typing import Protocol

from llmsim.observe.requestlog import AccessLog, Trace
from llmsim.observe.stats import CURRENT, WEBSOCKET, Exchange, Stats
from llmsim.observe.tracing import create as create_tracing
from llmsim.render.jsonbytes import decimal

API_PREFIXES = ("/openai/v1/", "/v1/")     # the default base paths' (settings.base_paths)
ENDPOINTS = {"responses": "responses", "chat": "chat", "models": "models",
             "conversations": "conversations", "realtime": "realtime", "embeddings": "embeddings",
             "completions": "completions", "moderations": "moderations"}
REQUEST_ID = b"x-request-id"
PROCESSING_MS = b"openai-processing-ms"
MAX_ID = 200            # a client's request id is echoed up to this many bytes
MAX_PATHS = 256         # endpoint names remembered per path (beyond: worked out each time)


def endpoint_of(path: str, prefixes: tuple[str, ...] = API_PREFIXES) -> str:
    for prefix in prefixes:
        if path.startswith(prefix):
            return ENDPOINTS.get(path[len(prefix):].split("/", 1)[0], "other")
    return "other"


MAX_PLANNED = 1024       # distinct planned headers remembered (a profile with no spread has a few)


class GcPolicy(Protocol):
    """When the garbage collector may pause the process (llmsim.server.collector.Collector)."""

    due: float      # `request_ended` may do something once `now` reaches this (else: not called)

    def serving(self, now: float) -> None: ...

    def stopped(self) -> None: ...

    def request_ended(self, now: float, in_flight: int) -> None: ...


class Observer:
    def __init__(self, simulator, collector: GcPolicy | None = None):
        self.stats: Stats = simulator.stats
        self.counting = self.stats.enabled
        settings = simulator.settings
        # the base paths with their slash, longest first (the bare base path "" is "/")
        self.prefixes = tuple(sorted((base + "/" for base in settings.base_paths), key=len, reverse=True))
        writers = []
        if settings.trace:
            writers.append(Trace(settings.trace))
        if settings.log_format and settings.log_format != "off":
            writers.append(AccessLog(settings.log_format))
        self.writers = self.stats.writers = tuple(writers)
        self._rng = random.Random()
        self._ids = simulator.ids
        self._endpoints: dict[str, str] = {}
        # (TTFT, duration, visible tokens) -> the planned answer's headers (`headers`)
        self._planned: dict[tuple[float, float, int], tuple] = {}
        self.tracing = create_tracing(settings)     # OpenTelemetry: None unless asked for
        # the tuned server's garbage collection policy (llmsim.server.collector, given from
        # above by llmsim.api.front); None: CPython's
        self.collector = collector
        self.pacers = simulator.drain.pacers      # the app's (llmsim.pacing.pacer): `catch_up` as requests start and end

    def endpoint(self, path: str) -> str:
        name = self._endpoints.get(path)
        if name is None:
            name = endpoint_of(path, self.prefixes)
            if len(self._endpoints) < MAX_PATHS:
                self._endpoints[path] = name
        return name

    def request_id(self, headers: dict) -> str:
        """The client's `x-request-id` (`headers`: the request's, as a dict), else a new id."""
        given = headers.get(REQUEST_ID)
        if given:
            return given[:MAX_ID].decode("latin-1")
        return self._ids.make("request", self._rng)

    # -- the server's life (lifespan) ------------------------------------------------------
    def serving(self) -> None:
        self.stats.serving()
        if self.tracing is not None:
            self.tracing.serving()
        if self.collector is not None:
            self.collector.serving(time.perf_counter())

    def stopped(self) -> None:
        if self.collector is not None:
            self.collector.stopped()
        self.stats.stopped()
        if self.tracing is not None:
            self.tracing.stopped()

    # -- one HTTP request ------------------------------------------------------------------
    def begin(self, scope, path: str, headers: dict) -> Exchange:
        """The request (`headers`: its headers as a dict) has arrived: its exchange, current
        until `end`."""
        self.pacers.catch_up()
        given = headers.get(REQUEST_ID)            # (`request_id`, inline)
        ex = Exchange(given[:MAX_ID].decode("latin-1") if given else self._ids.make("request", self._rng),
                      scope["method"], path, headers, self.stats)
        ex.token = CURRENT.set(ex)
        self.stats.active += 1
        return ex

    def headers(self, ex: Exchange, status: int) -> list[tuple[bytes, bytes]]:
        """The response starts with `status`: the headers the observer adds to it."""
        ex.status = status
        added = [(REQUEST_ID, ex.id.encode("latin-1")),
                 (PROCESSING_MS, decimal(int((perf_counter() - ex.start) * 1000)))]
        plan = ex.plan
        if plan is not None:
            delay = ex.delay            # the serving model's wait and prefill
            usage = plan.usage
            key = (plan.first_token_at + delay, plan.end_at + delay,
                   usage.total_tokens - usage.input_tokens - usage.reasoning_tokens)   # (output_tokens)
            added += self._planned.get(key) or self._planned_headers(key)
        return added

    def _planned_headers(self, key: tuple[float, float, int]) -> tuple:
        ttft, duration, tokens = key
        found = ((b"x-llmsim-ttft-ms", b"%.3f" % (ttft * 1000.0)),      # to the microsecond
                 (b"x-llmsim-duration-ms", b"%.3f" % (duration * 1000.0)),
                 (b"x-llmsim-tokens", decimal(tokens)))
        if len(self._planned) < MAX_PLANNED:
            self._planned[key] = found
        return found

    def end(self, ex: Exchange) -> None:
        """The request has ended (answered or not)."""
        CURRENT.reset(ex.token)
        now = perf_counter()
        stats = self.stats
        stats.active -= 1
        collector = self.collector
        if collector is not None and now >= collector.due:
            collector.request_ended(now, stats.active)
        if ex.endpoint is None:         # not planned (`Stats.record` names it): named by its path
            ex.endpoint = self._endpoints.get(ex.path) or self.endpoint(ex.path)
        if self.counting:
            stats.request_finished(ex, now - ex.start)
        if self.writers:
            end = ex.wall + (now - ex.start)
            for writer in self.writers:
                writer.write(ex, end)
        if self.tracing is not None:
            self.tracing.record_exchange(ex, now)
        # Timers the request armed keep a copy of its context (so this exchange) until
        # they would have fired, cancelled or not: let its plan go now.
        ex.plan = None
        self.pacers.catch_up()

    # -- one WebSocket connection ----------------------------------------------------------
    async def websocket(self, scope, receive, send, path: str, app) -> None:
        ex = Exchange(self.request_id(dict(scope.get("headers") or ())), "WS", path, None, self.stats)
        ex.kind = ex.endpoint = WEBSOCKET
        token = CURRENT.set(ex)
        stats = self.stats

        async def observed_send(message):
            if message["type"] == "websocket.accept" and not ex.status:
                ex.status = 101
                if self.counting:
                    stats.ws_opened()
            await send(message)

        try:
            await app(scope, receive, observed_send)
        finally:
            CURRENT.reset(token)
            if ex.status and self.counting:
                stats.ws_closed()
