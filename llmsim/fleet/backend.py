"""One fleet backend: an `llmsim serve` server in a process of its own, told its mode by the fleet.

The supervisor (llmsim.fleet.supervisor) forks the process with its listening socket bound
and a pipe; the process builds its app (`create_app`, its own Simulator, stats and /metrics),
serves the socket, says `listening` on the pipe, then applies each mode the pipe sends:
* None: serving; `starting` (before ready_after_s) and `503`: every request but /metrics and
  /llmsim/... answers 503 in its API's envelope (/health too);
* `hang`: those requests wait, then are answered once the mode changes;
* `refuse`: the listening socket closes and open connections are reset; it binds again after;
* `slow`: the setting latency_factor times the outage's factor (as PATCH /llmsim/config would).
The pipe closing (the supervisor gone) stops the server.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import socket
import sys

import uvicorn

from llmsim.errors import ConfigError, ServiceUnavailableError
from llmsim.fleet.spec import Backend
from llmsim.server.quiet import QuietServer

log = logging.getLogger("llmsim")
OWN_PATHS = ("/metrics", "/llmsim/")    # answered whatever the mode: a scraper sees the backend
REBIND_RETRY_S = 0.5


class Gate:
    """The ASGI app in front of llmsim's own (`Front`): what the mode does to a request."""

    def __init__(self, front, name: str, mode: str | None, ready_after_s: float):
        self.front = front
        self.name = name
        self.mode = mode
        self.ready_after_s = ready_after_s
        self._released: asyncio.Event | None = None     # set when a hang ends

    def eager(self, scope) -> bool:     # llmsim.server.starting: only when nothing may wait here
        return self.mode in (None, "slow") and self.front.eager(scope)

    def set_mode(self, mode: str | None) -> None:
        if self.mode == "hang" and mode != "hang" and self._released is not None:
            self._released.set()
            self._released = None
        self.mode = mode

    async def __call__(self, scope, receive, send) -> None:
        mode = self.mode
        if mode is not None and mode != "slow" and scope["type"] in ("http", "websocket") \
                and not scope["path"].startswith(OWN_PATHS):
            if mode == "hang":
                if self._released is None:
                    self._released = asyncio.Event()
                await self._released.wait()
            else:               # starting, 503, or a connection opened before the port closed
                await self._unavailable(scope, receive, send, mode)
                return
        await self.front(scope, receive, send)

    async def _unavailable(self, scope, receive, send, mode: str) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1013})   # try again later
            return
        why = (f"is starting (ready {self.ready_after_s:g} s after the fleet started)" if mode == "starting"
               else f"is unavailable (a {mode} outage)")
        error = ServiceUnavailableError(f"The backend {self.name} {why}; retry later.")
        claim = self.front.claim        # the API the request is for: its envelope (llmsim.api.apis)
        path = (claim(scope, dict(scope["headers"])) if claim is not None else scope)["path"]
        await self.front.render_error(error, path)(scope, receive, send)


class BackendServer(uvicorn.Server):
    """uvicorn's server, taking modes from the pipe once it listens."""

    def __init__(self, config: uvicorn.Config, gate: Gate, pipe, backend: Backend):
        super().__init__(config)
        self.gate, self.pipe, self.backend = gate, pipe, backend
        self.base_factor = backend.settings.latency_factor
        self.refusing = False
        self._rebinding: asyncio.Task | None = None
        self._patching: asyncio.Task | None = None

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.should_exit:
            return
        asyncio.get_running_loop().add_reader(self.pipe.fileno(), self._command)
        self.pipe.send(("listening", os.getpid()))

    def _command(self) -> None:
        try:
            kind, mode, factor = self.pipe.recv()
        except (EOFError, OSError):         # the supervisor is gone: so is its fleet
            asyncio.get_running_loop().remove_reader(self.pipe.fileno())
            self.should_exit = True
            return
        if kind == "mode":
            self.apply(mode, factor)

    def apply(self, mode: str | None, factor: float) -> None:
        gate = self.gate
        was = gate.mode
        gate.set_mode(mode)
        if mode == "refuse" and not self.refusing:
            self._refuse()
        elif mode != "refuse" and self.refusing:
            self.refusing = False
            self._rebinding = asyncio.ensure_future(self._listen_again())
        if (mode == "slow") != (was == "slow") or mode == "slow":
            wanted = min(1000.0, self.base_factor * (factor if mode == "slow" else 1.0))   # the setting's bound
            self._patching = asyncio.ensure_future(gate.front.live.patch({"latency_factor": wanted}))

    def _refuse(self) -> None:
        """The port closed, as if the process had died: connections refused, open ones reset."""
        self.refusing = True
        if self._rebinding is not None:
            self._rebinding.cancel()
        for server in self.servers:
            server.close()
        self.servers = []
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()

    async def _listen_again(self) -> None:
        config = self.config
        create_protocol = functools.partial(config.http_protocol_class, config=config,
                                            server_state=self.server_state, app_state=self.lifespan.state)
        while not self.refusing and not self.should_exit:
            sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((config.host, config.port))
            except OSError as exc:      # taken meanwhile: keep trying while the mode says serve
                sock.close()
                log.warning("fleet backend %s: cannot listen on port %s again (%s); retrying",
                            self.backend.name, config.port, exc)
                await asyncio.sleep(REBIND_RETRY_S)
                continue
            self.servers.append(await asyncio.get_running_loop().create_server(
                create_protocol, sock=sock, backlog=config.backlog))
            return


class QuietBackendServer(BackendServer, QuietServer):
    """The tuned server's: asleep while idle (llmsim.server.quiet)."""


def uvicorn_options(backend: Backend) -> dict:
    """`llmsim serve`'s uvicorn options for one process (llmsim.cli), on the tuned or plain server."""
    settings = backend.settings
    options = dict(host=settings.host, port=settings.port, log_level=settings.log_level,
                   access_log=False, lifespan="on", proxy_headers=False,
                   timeout_graceful_shutdown=settings.graceful_timeout_s)
    if settings.server == "tuned":
        try:
            import httptools  # noqa: F401
            http = "llmsim.server.corking:CorkedHttpToolsProtocol"
        except ImportError:
            http = "auto"
        options.update(http=http, loop="llmsim.server.accepting:new_event_loop")
    else:
        options.update(http="llmsim.server.deadlines:PlainProtocol")
    return options


def run(backend: Backend, sock: socket.socket, pipe, mode: str | None) -> None:
    """The backend process (forked by the supervisor): serve until told to stop, or the pipe closes.
    A ConfigError building the app is sent on the pipe; the process then exits with status 2."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)   # the supervisor's handler is not ours
    from llmsim.app import create_app
    from llmsim.server.versions import choose
    backend = _with(backend, server=choose(backend.settings.server))
    try:
        front = create_app(backend.settings)
    except ConfigError as exc:
        pipe.send(("error", str(exc)))
        sys.exit(2)
    gate = Gate(front, backend.name, mode, backend.ready_after_s)
    server_class = QuietBackendServer if backend.settings.server == "tuned" else BackendServer
    server = server_class(uvicorn.Config(gate, **uvicorn_options(backend)), gate, pipe, backend)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    sys.exit(0 if server.started else 3)


def _with(backend: Backend, **changes) -> Backend:
    from dataclasses import replace
    return replace(backend, settings=backend.settings.replace(**changes))
