"""`llmsim fleet FILE`: start every backend of a fleet file, then serve the control address.

One process per backend, forked from this one once it has imported the app's modules and
loaded the tokenizer (shared, copy-on-write, by every backend), all started at once; each
builds its own app, so nothing (stats, /metrics, module-level state) is shared between
backends. Listening sockets are bound here first (port 0: any free port; replicas on
consecutive ports), so a port in use is a start-up error naming the backend.

The supervisor owns each backend's mode (starting, an outage, serving) and sends it down the
backend's pipe when it changes: at ready_after_s, at each scheduled outage's start and end,
and on POST / DELETE /llmsim/fleet/{name}/outage. Times count from the moment every backend
listens. Stopping the fleet (Ctrl-C, SIGTERM) stops every backend.
"""
from __future__ import annotations

import asyncio
import gc
import multiprocessing
import signal
import socket
import sys
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from pathlib import Path

import orjson
import uvicorn

from llmsim import datafiles
from llmsim.errors import (APIError, ConfigError, InvalidRequestError, MethodNotAllowedError,
                           NotFoundError)
from llmsim.fleet import backend as backend_process
from llmsim.fleet import warm
from llmsim.render.templates import TemplateSet
from llmsim.fleet.spec import MODES, SLOW_FACTOR, Backend, Fleet, Outage, load

START_TIMEOUT_S = 120.0     # a backend that has not listened by then fails the start-up
STOP_TIMEOUT_S = 5.0        # SIGTERM, then SIGKILL


@dataclass(eq=False)
class Member:
    """One backend as the supervisor sees it."""
    backend: Backend
    process: multiprocessing.process.BaseProcess | None = None
    pipe: object = None
    pid: int | None = None
    starting: bool = False                  # before its ready_after_s
    outage: Outage | None = None
    outage_ends: float | None = None        # on the loop's clock; None: until DELETE
    exited: bool = False
    sent: tuple | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        host = self.backend.settings.host
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.backend.settings.port}"

    @property
    def mode(self) -> str | None:
        if self.outage is not None:
            return self.outage.mode
        return "starting" if self.starting else None

    @property
    def state(self) -> str:
        if self.exited or (self.outage is not None and self.outage.down):
            return "down"
        return "starting" if self.starting else "ready"


class Supervisor:
    def __init__(self, fleet: Fleet, members: list[Member]):
        self.fleet = fleet
        self.members = {m.backend.name: m for m in members}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started = 0.0
        # the control address's answers; compiled when the backends were warmed (llmsim.fleet.warm)
        self.templates = TemplateSet(datafiles.TEMPLATES_DIR)

    # ---- modes ------------------------------------------------------------------------
    def begin(self, now: float) -> None:
        """Every backend listens: count ready_after_s and the scheduled outages from `now`."""
        self.loop = asyncio.get_running_loop()
        self.started = now
        for member in self.members.values():
            if member.backend.ready_after_s:
                member.starting = True
                self.loop.call_at(now + member.backend.ready_after_s, self._ready, member)
            for outage in member.backend.outages:
                self.loop.call_at(now + outage.at_s, self.take_down, member, outage)
            self.loop.add_reader(member.pipe.fileno(), self._heard, member)
            self.push(member)

    def take_down(self, member: Member, outage: Outage) -> None:
        member.outage = outage
        member.outage_ends = None if outage.for_s is None else self.loop.time() + outage.for_s
        if outage.for_s is not None:
            self.loop.call_at(member.outage_ends, self._outage_over, member, outage)
        self.push(member)

    def bring_up(self, member: Member) -> None:
        member.outage = member.outage_ends = None
        self.push(member)

    def _ready(self, member: Member) -> None:
        member.starting = False
        self.push(member)

    def _outage_over(self, member: Member, outage: Outage) -> None:
        if member.outage is outage:         # not replaced (or taken back) since
            self.bring_up(member)

    def push(self, member: Member) -> None:
        """Send the member its mode, if it changed."""
        message = ("mode", member.mode, member.outage.factor if member.outage is not None else 1.0)
        if member.exited or message == member.sent:
            return
        try:
            member.pipe.send(message)
            member.sent = message
        except OSError:
            self._gone(member)

    def _heard(self, member: Member) -> None:
        try:
            member.pipe.recv()
        except (EOFError, OSError):
            self._gone(member)

    def _gone(self, member: Member) -> None:
        if not member.exited:
            member.exited = True
            self.loop.remove_reader(member.pipe.fileno())
            print(f"llmsim fleet: backend {member.backend.name} exited", file=sys.stderr, flush=True)

    # ---- the control address -----------------------------------------------------------
    def view(self, member: Member) -> "View":
        now = self.loop.time()
        remaining = None if member.outage_ends is None else round(max(0.0, member.outage_ends - now), 3)
        return View(member.backend.name, member.url, member.backend.models, member.state,
                    member.outage, remaining, member.pid)

    async def app(self, scope, receive, send) -> None:
        """The control address's ASGI app (its document: openapi/fleet.yaml; its answers:
        templates/fleet.yaml, fleet_backend.yaml and errors.yaml)."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        if scope["type"] != "http":
            return
        try:
            status, body = 200, await self._route(scope, receive)
        except APIError as exc:
            status, body = exc.status, self.templates["errors"].body_json(error=exc)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status == 405:
            headers.append((b"allow", b"GET" if scope["path"].rstrip("/").endswith("fleet") else b"POST, DELETE"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _route(self, scope, receive) -> bytes:
        method, path = scope["method"], scope["path"]
        parts = path.strip("/").split("/")
        if parts[:2] != ["llmsim", "fleet"] or len(parts) not in (2, 4) or (len(parts) == 4 and parts[3] != "outage"):
            raise NotFoundError(f"Unknown request URL: {method} {path}. The fleet's control routes are "
                                "/llmsim/fleet and /llmsim/fleet/{name}/outage.")
        if len(parts) == 2:
            if method != "GET":
                raise MethodNotAllowedError(f"Method {method} is not allowed for {path}.")
            return self.templates["fleet"].body_json(uptime_s=round(self.loop.time() - self.started, 3),
                                                     backends=[self.view(m) for m in self.members.values()])
        member = self.members.get(parts[2])
        if member is None:
            raise NotFoundError(f"No backend named {parts[2]!r}; the fleet's backends: {', '.join(self.members)}.",
                                param="name", code="backend_not_found")
        if method == "DELETE":
            self.bring_up(member)
        elif method == "POST":
            self.take_down(member, _outage_of(await _body(receive)))
        else:
            raise MethodNotAllowedError(f"Method {method} is not allowed for {path}.")
        return self.templates["fleet_backend"].body_json(backend=self.view(member))


@dataclass(frozen=True)
class View:
    """One backend as the control address shows it (templates/fleet.yaml)."""
    name: str
    url: str
    models: list[str] | None
    state: str                  # starting | ready | down
    outage: Outage | None
    remaining_s: float | None   # until the outage ends; None: until DELETE (or none)
    pid: int | None


def _outage_of(body: bytes) -> Outage:
    """A POST body {mode, for_s, factor} as an Outage; InvalidRequestError naming the field when it is not one."""
    try:
        doc = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        raise _invalid("The body is not valid JSON; expected {\"mode\": ..., \"for_s\": ...}.", None) from None
    if not isinstance(doc, dict):
        raise _invalid("Expected a JSON object {\"mode\": ..., \"for_s\": ...}.", None)
    unknown = sorted(set(doc) - {"mode", "for_s", "factor"})
    if unknown:
        raise _invalid(f"Unknown field {unknown[0]!r}; an outage has mode, for_s and factor.", unknown[0])
    mode = doc.get("mode")
    if mode not in MODES:
        raise _invalid(f"mode: expected one of {', '.join(MODES)}, got {mode!r}.", "mode")
    for_s, factor = doc.get("for_s"), doc.get("factor", SLOW_FACTOR)
    if for_s is not None and (not _number(for_s) or for_s <= 0):
        raise _invalid(f"for_s: expected seconds > 0 (or null: until DELETE), got {for_s!r}.", "for_s")
    if not _number(factor) or not 0 < factor <= 1000:
        raise _invalid(f"factor: expected a number > 0 (at most 1000), got {factor!r}.", "factor")
    if "factor" in doc and mode != "slow":
        raise _invalid("factor: only a slow outage has a factor.", "factor")
    return Outage(mode, None if for_s is None else float(for_s), 0.0, float(factor))


def _invalid(message: str, param: str | None) -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code="invalid_value")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


async def _body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


# ---- start-up ------------------------------------------------------------------------------
def bind(fleet: Fleet) -> list[tuple[Backend, socket.socket]]:
    """Each backend's listening socket, its port resolved; ConfigError naming a port in use."""
    bound: list[tuple[Backend, socket.socket]] = []
    try:
        i = 0
        backends = fleet.backends
        while i < len(backends):
            group = [b for b in backends if b.where == backends[i].where]   # one entry's replicas
            if group[0].port == 0 and len(group) > 1:
                bound += _consecutive(fleet.host, group)
            else:
                for b in group:
                    bound.append(_bound(fleet, b))
            i += len(group)
    except BaseException:
        for _, sock in bound:
            sock.close()
        raise
    return bound


def _socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _bound(fleet: Fleet, backend: Backend) -> tuple[Backend, socket.socket]:
    try:
        sock = _socket(fleet.host, backend.port)
    except OSError as exc:
        raise ConfigError(f"{fleet.path}: at {backend.where}.port: backend {backend.name} cannot listen on "
                          f"{fleet.host}:{backend.port} ({exc.strerror}); choose another port or 0") from None
    port = sock.getsockname()[1]
    return replace(backend, port=port, settings=backend.settings.replace(port=port)), sock


def _consecutive(host: str, group: list[Backend], tries: int = 50) -> list[tuple[Backend, socket.socket]]:
    """Replicas with port 0: the first free port the kernel gives, and the ones after it."""
    for _ in range(tries):
        first = _socket(host, 0)
        socks = [first]
        base = first.getsockname()[1]
        try:
            for n in range(1, len(group)):
                socks.append(_socket(host, base + n))
        except OSError:
            for s in socks:
                s.close()
            continue
        return [(replace(b, port=base + n, settings=b.settings.replace(port=base + n)), s)
                for n, (b, s) in enumerate(zip(group, socks))]
    raise ConfigError(f"no {len(group)} consecutive free ports for {group[0].where}'s replicas; "
                      "give the backend a port")


def prepare(fleet: Fleet) -> None:
    """What every backend needs, loaded once here and shared by the forked processes: the
    modules, the tokenizer, and an app built (llmsim.fleet.warm) for each set of templates,
    documents and data files the backends use."""
    warm.install()
    built = set()
    for backend in fleet.backends:      # one app per set of templates, documents and data files
        s = backend.settings
        if (key := (s.templates, s.spec, s.data, s.server)) not in built:
            built.add(key)
            try:
                warm.warm(s)
            except ConfigError as exc:
                raise ConfigError(f"{backend.where} (backend {backend.name}): {exc}") from None
    gc.freeze()     # moved out of the collector's way: forked backends keep sharing these pages


def start(bound: list[tuple[Backend, socket.socket]]) -> list[Member]:
    """Fork one process per backend, all at once; return once every one listens.
    A backend that fails (its settings, its app) stops the others: ConfigError naming it."""
    context = multiprocessing.get_context("fork")
    members: list[Member] = []
    sockets = [sock for _, sock in bound]
    for b, sock in bound:
        ours, theirs = context.Pipe()
        process = context.Process(target=_child, name=f"llmsim-fleet-{b.name}", daemon=False,
                                  args=(b, sock, theirs, sockets, [ours, *(m.pipe for m in members)]))
        process.start()
        theirs.close()
        members.append(Member(b, process, ours))
    for sock in sockets:
        sock.close()        # the backend's copy alone: closing it (refuse) closes the port
    waiting = {m.pipe: m for m in members}
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                names = ", ".join(m.backend.name for m in waiting.values())
                raise ConfigError(f"backends {names} did not listen within {START_TIMEOUT_S:g} s")
            for pipe in wait(list(waiting), remaining):
                member = waiting.pop(pipe)
                try:
                    kind, detail = pipe.recv()
                except (EOFError, OSError):
                    kind, detail = "error", f"its process exited (status {member.process.exitcode})"
                if kind == "error":
                    raise ConfigError(f"{member.backend.where} (backend {member.backend.name}): {detail}")
                member.pid = detail
    except BaseException:
        stop(members)
        raise
    return members


def _child(b: Backend, sock: socket.socket, pipe, sockets: list, pipes: list) -> None:
    # inherited: the other backends' sockets and pipes, and the supervisor's end of this one's
    # pipe (closed here, so that the supervisor's exit closes the pipe)
    for other in sockets:
        if other is not sock:
            other.close()
    for other in pipes:
        other.close()
    mode = "starting" if b.ready_after_s else None
    backend_process.run(b, sock, pipe, mode)


def stop(members: list[Member]) -> None:
    for m in members:
        if m.process is not None and m.process.is_alive():
            m.process.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for m in members:
        if m.process is not None:
            m.process.join(max(0.0, deadline - time.monotonic()))
            if m.process.is_alive():
                m.process.kill()
                m.process.join()


class Terminated(BaseException):
    """SIGTERM, raised where the supervisor is, so that it stops its backends."""


def _terminated(signum, frame) -> None:
    raise Terminated(signum)


def run(path: str, control_port: int = 0, out=None) -> int:
    """`llmsim fleet FILE`: until Ctrl-C or SIGTERM. Raises ConfigError before anything listens."""
    out = out or sys.stdout
    began = time.monotonic()
    fleet = load(Path(path))
    prepare(fleet)
    bound = bind(fleet)
    try:
        control = _socket(fleet.host, control_port)
    except OSError as exc:
        for _, sock in bound:
            sock.close()
        raise ConfigError(f"control-port: cannot listen on {fleet.host}:{control_port} ({exc.strerror}); "
                          "choose another port or 0") from None
    control.set_inheritable(False)
    try:
        members = start(bound)
    except BaseException:
        control.close()
        raise
    previous = signal.signal(signal.SIGTERM, _terminated)
    supervisor = Supervisor(fleet, members)
    host, port = control.getsockname()[:2]
    print(f"llmsim fleet: {len(members)} backends listening in {time.monotonic() - began:.1f} s; "
          f"control http://{host}:{port}/llmsim/fleet", file=out, flush=True)
    for m in members:
        print(f"  {m.backend.name}  {m.url}  models: {', '.join(m.backend.models or ['(all)'])}",
              file=out, flush=True)
    try:
        _serve_control(supervisor, control)
    except (KeyboardInterrupt, Terminated):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop(members)
    return 0


def _serve_control(supervisor: Supervisor, control: socket.socket) -> None:
    config = uvicorn.Config(supervisor.app, log_level="warning", access_log=False, lifespan="on",
                            interface="asgi3", proxy_headers=False)

    from llmsim.server.quiet import QuietServer
    from llmsim.server.versions import untested

    class ControlServer(uvicorn.Server if untested() else QuietServer):     # asleep while idle
        async def startup(self, sockets=None) -> None:
            supervisor.begin(asyncio.get_running_loop().time())
            await super().startup(sockets)

    ControlServer(config).run(sockets=[control])


def main(path: str, control_port: int | None = None) -> int:
    """The cli's entry: `llmsim fleet FILE [--control-port N]`."""
    return run(path, control_port or 0)

