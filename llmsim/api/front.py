"""The front door: the ASGI app `create_app` returns. Every request and connection enters here.

API requests are observed (llmsim.observe.observer) and checked (llmsim.api.guard), then served
by the fast lane (llmsim.api.fastpath, tuned server) or connexion; WebSocket upgrades go to the
Responses WebSocket router; `/health`, `/metrics` and `/llmsim/...` are checked, not observed.
Invariants: one layer, not a middleware each; any error becomes the provider's envelope through
`render_error`, the app's one renderer; beyond `max_connections` a request gets 503, a body
late past `body_timeout_s` 408, and `ConnectionDrop` ends the exchange unfinished.
The story: docs/internals.md#apifront.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable

from starlette.responses import Response

from llmsim.api.deadline import BodyDeadline, late
from llmsim.api.guard import JSON, Access, Guard, refuse_websocket
from llmsim.errors import APIError, ConnectionDrop, ServerError, ServiceUnavailableError
from llmsim.observe.observer import Observer
from llmsim.observe.requestlog import redact_credentials
from llmsim.pacing.transport import SSEResponse
from llmsim.server.collector import Collector
from llmsim.server.connection import respond

if TYPE_CHECKING:   # types only: `--server plain` never imports the fast lane
    from llmsim.api.apis import Apis
    from llmsim.api.fastpath import Operation

ADMIN_PATHS = frozenset({"/metrics", "/health"})
ADMIN_PREFIX = "/llmsim/"
INFINITE = 2**63        # max_connections unset
log = logging.getLogger("llmsim")


async def sweep(orphans) -> None:
    """Mark failed the background responses a stopped server left running (never fatal)."""
    try:
        await orphans()
    except Exception:
        log.exception("could not mark the background responses of a stopped server failed")


def is_admin(path: str) -> bool:
    """`/health`, `/metrics` and `/llmsim/...`: llmsim's own routes, whatever the base paths."""
    return path in ADMIN_PATHS or path.startswith(ADMIN_PREFIX)


class Front:
    def __init__(self, app, *, simulator, operations: dict[str, Operation], websockets,
                 render_error: Callable[..., Response], base_paths: tuple[str, ...],
                 tuned: bool = True, apis: Apis | None = None):
        self.app = app                          # connexion: every route not served here
        schedule = lambda collect: asyncio.get_running_loop().call_soon(collect)
        self.observer = Observer(simulator, Collector(schedule=schedule)
                                 if tuned else None)    # the tuned server's GC policy; plain: CPython's
        self.guard = Guard(settings=simulator.settings, base_paths=base_paths, admin=is_admin,
                           access=Access(), apis=apis)
        self.operations = operations            # the fast lane: none on `--server plain`
        self.tuned = tuned                      # `llmsim serve`'s own protocol may be writing
        self.websockets = websockets            # the Responses WebSocket router
        self.render_error = render_error        # (error, path): in the envelope of path's API
        # other providers' documents (llmsim.api.apis): one moves a request it claims under its own
        # base path; `claim` is called only for a path not known yet or a header that may move it
        self.claim = apis.claim if apis is not None and apis.documents else None
        self.heads = apis.heads if self.claim is not None else None     # path -> the headers that move it
        self.eager_ok = not simulator.store.needs_task
        self.webhooks = simulator.state.webhooks
        self.jobs = simulator.state.jobs                # keeps this process's lease on background responses
        # one process: no other runs background responses, so any a persistent store holds as
        # running were left by a server that stopped (--workers: `llmsim serve` sweeps first)
        self.fail_orphans = simulator.state.fail_orphans
        self.sweeps = simulator.settings.workers == 1
        self.live = simulator.live                    # settings changed at runtime (llmsim.state.liveconfig)
        self.graceful_timeout = simulator.settings.graceful_timeout_s
        self.drain = simulator.drain                  # the app's shutdown, and its paced streams
        # the request deadlines the tuned server keeps (llmsim.server.deadlines, .requestcycle);
        # on `--server plain` the body's is kept here (`_bounded`)
        self.header_timeout_s = simulator.settings.header_timeout_s
        self.body_timeout_s = simulator.settings.body_timeout_s
        self.body_late = late           # (seconds): the error of a body late past them
        self.bounded = self.body_timeout_s is not None and not tuned
        self.max_open = simulator.settings.max_connections or INFINITE
        self.limited = simulator.settings.max_connections is not None     # unset: nothing counted
        self.open = 0       # (limited) requests in flight (API and llmsim's own) and WebSockets open

    def eager(self, scope) -> bool:
        """Whether the request may start before it has a task of its own (llmsim.server.starting):
        the operations served here, whose code never asks for its task, unless the store
        they may call does (`Store.needs_task`: Redis)."""
        return self.eager_ok and scope["method"] == "POST" and scope["path"] in self.operations

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "http":
            path = scope["path"]
            if path in ADMIN_PATHS or path.startswith(ADMIN_PREFIX):      # is_admin, inline
                await self._admin(scope, receive, send)
            else:
                await self._api(scope, receive, send, path)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            redact_credentials()        # logging is configured by now
            if self.sweeps:
                await sweep(self.fail_orphans)
            self.observer.serving()
            self.webhooks.serving()
            self.jobs.serving()
            self.live.serving()
            self.drain.serving(self.graceful_timeout)     # streams still running at shutdown end with an error
            try:
                await self.app(scope, receive, send)
            finally:
                self.drain.stopped()
                await self.live.stopped()
                await self.jobs.stopped()
                await self.webhooks.stopped()
                self.observer.stopped()
        else:
            await self.app(scope, receive, send)

    def _too_many(self) -> ServiceUnavailableError:
        error = ServiceUnavailableError(
            f"Too many open connections (limit {self.max_open}, setting max_connections); retry later.")
        error.headers["connection"] = "close"
        return error

    def _bounded(self, receive, headers: dict):
        """`receive`, its body due within `body_timeout_s` seconds (llmsim.api.deadline); as it
        is when there is no body, or on the tuned server (which keeps the deadline itself)."""
        if not self.bounded or (b"content-length" not in headers and b"transfer-encoding" not in headers):
            return receive
        return BodyDeadline(receive, self.body_timeout_s)

    async def _api(self, scope, receive, send, path: str) -> None:
        observer = self.observer
        headers = dict(scope["headers"])
        ex = observer.begin(scope, path, headers)
        heads = self.heads
        if heads is not None:
            moving = heads.get(path)
            if moving is None or not moving.isdisjoint(headers):
                scope = self.claim(scope, headers)
        if self.bounded:
            receive = self._bounded(receive, headers)
        closing = False                 # the answer closes the connection (no tuned one-write answer)
        limited = self.limited
        if limited:
            self.open += 1
        try:
            try:
                if limited and self.open > self.max_open:
                    raise self._too_many()
                admitted = self.guard.admitted(scope, headers)
                if admitted is not None:
                    scope = admitted
                else:                       # a chunked body, read first
                    admitted = await self.guard.admit_chunked(scope, receive, headers)
                    if admitted is None:
                        return              # the client left
                    scope, receive = admitted
                op = self.operations.get(scope["path"]) if scope["method"] == "POST" else None  # fast lane
                response = None if op is None else await op.call(scope, receive, headers.get(b"content-type"))
            except APIError as exc:
                response = self.render_error(exc, scope["path"])
                closing = "connection" in exc.headers
            except Exception:
                log.exception("unexpected error on %s %s", scope["method"], path)
                response = self.render_error(ServerError.unexpected(), scope["path"])
            if response is None:
                await self.app(scope, receive, self._observed(send, ex))
            elif closing or not (self.tuned and self._try_respond(scope, response, ex)):
                await response(scope, receive, self._observed(send, ex))
        except ConnectionDrop:
            if not ex.status:       # headers promising a body that never comes
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", JSON), (b"content-length", b"1024")]})
        finally:
            if limited:
                self.open -= 1
            observer.end(ex)

    def _observed(self, send, ex):
        """`send`, adding the observer's headers to the response's start."""
        observer = self.observer

        def observed_send(message):     # returns send's awaitable: no coroutine of its own
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()),
                                      *observer.headers(ex, message["status"])]
            return send(message)
        return observed_send

    def _try_respond(self, scope, response: Response, ex) -> bool:
        """Whether `response` went to the client here: its head, and a JSON answer whole, in
        one write where the connection allows (llmsim.server.connection.respond). If not, the
        caller sends it (an SSE response: its body, after the head written here)."""
        if response.background is not None or scope["method"] == "HEAD":
            return False
        status = response.status_code
        headers = [*response.raw_headers, *self.observer.headers(ex, status)]
        if isinstance(response, SSEResponse):
            response.head_written = respond(scope, status, headers, None)
            return False
        return respond(scope, status, headers, response.body)

    async def _admin(self, scope, receive, send) -> None:
        """llmsim's own routes: counted among the open connections, never refused for them
        (an operator can still look at a full server)."""
        headers = dict(scope["headers"])
        limited = self.limited
        if limited:
            self.open += 1
        try:
            try:
                admitted = await self.guard.admit(scope, self._bounded(receive, headers), headers)
            except APIError as exc:
                await self.render_error(exc)(scope, receive, send)
                return
            if admitted is not None:
                await self.app(*admitted, send)
        finally:
            if limited:
                self.open -= 1

    async def _websocket(self, scope, receive, send) -> None:
        try:
            if self.open >= self.max_open:
                raise self._too_many()
            self.guard.check(scope, dict(scope.get("headers") or ()))
            refused = None
        except APIError as exc:
            refused = exc

        async def app(scope, receive, send):
            if refused is not None:
                await refuse_websocket(scope, send, refused, self.render_error(refused).body)
            else:
                await self.websockets(scope, receive, send)
        self.open += 1
        try:
            await self.observer.websocket(scope, receive, send, scope.get("path", ""), app)
        finally:
            self.open -= 1
