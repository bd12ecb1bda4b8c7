"""Responses API WebSocket mode: `response.create` frames in, the SSE stream's events out.

Served on `{base}/responses` for each base path when the request is a WebSocket upgrade
(llmsim.api.front routes it here). Invariants: a body is checked against the same
`CreateResponseRequest` schema as over HTTP; events are the `responses` template's, rendered
and faulted as over HTTP, one per text frame; one response at a time, in arrival order, so two
responses' events never interleave; `previous_response_id` names the connection's latest
response; an error is a `templates/websocket.yaml` event and the connection stays usable.
Frames, warm-up, faults and limits: docs/internals.md#apiwebsocket.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
from starlette.routing import Router, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketDisconnected

from llmsim import datafiles
from llmsim.api import validation
from llmsim.api.adapters import Adapter
from llmsim.api.pipeline import Call, Pipeline, control
from llmsim.errors import (APIError, ConfigError, ConnectionDrop, InvalidRequestError, NotFoundError,
                           PreviousResponseNotFoundError, ServerError)
from llmsim.pacing import transport
from llmsim.server.documents import resolved
from llmsim.sim import inputs
from llmsim.sim import responses_plan as planning
from llmsim.simulator import Simulator

log = logging.getLogger("llmsim.websocket")
CREATE = "response.create"
TRACED_API = "responses"    # a turn's span: the Responses API's (llmsim/data/genai.yaml)
UPGRADED = 101              # a turn's http.response.status_code: its connection's upgrade
REQUEST_SCHEMA = "CreateResponseRequest"
CLOSE_NORMAL, CLOSE_TRY_AGAIN_LATER = 1000, 1013
CLOSE_DROPPED = 1011       # an injected stream_drop fault: the socket ends mid-response
CLOSE_SHUTDOWN = 1012      # the server is shutting down (what uvicorn closes idle sockets with)
QUEUED_FRAMES = 256          # per connection; beyond this the socket is not read (backpressure)
GONE = (WebSocketDisconnect, WebSocketDisconnected)


def request_validator(spec_path: Path):
    """The compiled `CreateResponseRequest` schema of our OpenAPI document (as HTTP uses it)."""
    schemas = resolved(datafiles.read_yaml(spec_path)).get("components", {}).get("schemas", {})
    if REQUEST_SCHEMA not in schemas:
        raise ConfigError(f"{spec_path}: components.schemas.{REQUEST_SCHEMA} is missing "
                          "(WebSocket response.create frames are checked against it)")
    return validation.compile_schema(schemas[REQUEST_SCHEMA])


def parse_frame(raw: str | bytes, validator) -> tuple[dict, bool]:
    """The create body of one frame and whether to generate; raises InvalidRequestError."""
    try:
        frame = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(f"We could not parse the JSON of your WebSocket message: {exc}.",
                                  code="invalid_json") from None
    if not isinstance(frame, dict):
        raise InvalidRequestError(f"A WebSocket message must be a JSON object, got {type(frame).__name__}.",
                                  code="invalid_type")
    kind = frame.get("type")
    if kind is None:
        raise InvalidRequestError("Missing required parameter: 'type'.", param="type",
                                  code="missing_required_parameter")
    if kind != CREATE:
        raise InvalidRequestError(f"Invalid value: {kind!r}. Supported values are: '{CREATE}'.",
                                  param="type", code="invalid_value")
    if "response" in frame:
        body = frame["response"]
        extra = sorted(set(frame) - {"type", "response"})
        if not isinstance(body, dict):
            raise InvalidRequestError(f"Invalid type for 'response': expected object, got "
                                      f"{type(body).__name__}.", param="response", code="invalid_type")
        if extra:
            raise InvalidRequestError(f"Unrecognized request argument supplied: {extra[0]} (with a nested "
                                      "'response', every field goes inside it)", param=extra[0],
                                      code="unknown_parameter")
    else:
        body = {k: v for k, v in frame.items() if k != "type"}
    return _ws_fields(body, validator)


def _ws_fields(body: dict, validator) -> tuple[dict, bool]:
    """Take the WebSocket-only fields out, check the rest like an HTTP body."""
    body = dict(body)
    generate = body.pop("generate", True)
    if not isinstance(generate, bool):
        raise InvalidRequestError(f"Invalid type for 'generate': expected boolean, got "
                                  f"{type(generate).__name__}.", param="generate", code="invalid_type")
    if "stream_id" in body:
        raise InvalidRequestError("WebSocket lanes (stream_id) are not supported by this server: every "
                                  "response on a connection is served in order. Remove stream_id.",
                                  param="stream_id", code="unsupported_parameter")
    validation.check(validator, body)
    if body.pop("background", None):
        raise InvalidRequestError("Background mode is not supported over WebSocket.",
                                  param="background", code="unsupported_parameter")
    body.pop("stream", None)
    body.pop("stream_options", None)
    return body, generate


@dataclass(slots=True)
class Conversation:
    """The most recent finished response of a connection: its id and every turn so far."""
    response_id: str
    turns: list[inputs.Turn]


class ResponsesSocket:
    """The WebSocket endpoint of one app: counts open connections, serves each one."""

    def __init__(self, simulator: Simulator, pipeline: Pipeline, adapter: Adapter):
        self.simulator, self.pipeline, self.adapter = simulator, pipeline, adapter
        self.validator = request_validator(simulator.settings.spec_path)
        self.responses = simulator.templates["responses"]
        self.ws_errors = simulator.templates["websocket"]
        self.http_errors = simulator.templates["errors"]
        self.open = 0
        self.tracing = None         # llmsim.observe.tracing's, when OpenTelemetry is on (set by llmsim.app)

    def router(self, base_paths) -> Router:
        routes = [WebSocketRoute(f"{base}/responses", self.endpoint) for base in base_paths]
        return Router(routes, default=self.not_found)

    async def endpoint(self, websocket: WebSocket) -> None:
        limit = self.simulator.settings.ws_max_connections
        if self.open >= limit:
            await self.refuse(websocket, APIError(
                f"Too many open WebSocket connections (limit {limit}); close one or retry later.",
                status=503, type="server_error", code="websocket_connection_cap_reached"))
            return
        self.open += 1
        try:
            await websocket.accept()
            await Connection(self, websocket).run()
        finally:
            self.open -= 1

    async def not_found(self, scope, receive, send) -> None:
        websocket = WebSocket(scope, receive, send)
        await self.refuse(websocket, NotFoundError(f"Unknown request URL: GET {websocket.url.path}."))

    async def refuse(self, websocket: WebSocket, exc: APIError) -> None:
        """Answer an upgrade with an HTTP error in the provider's JSON envelope."""
        if "websocket.http.response" in websocket.scope.get("extensions", {}):
            await websocket.send_denial_response(transport.json_response(
                self.http_errors.body(error=exc), exc.status, exc.headers))
        else:
            await websocket.accept()
            await websocket.close(CLOSE_TRY_AGAIN_LATER, exc.message[:120])


class Connection:
    """One socket: a reader queues frames, a worker answers them in order, a clock ends it."""

    def __init__(self, endpoint: ResponsesSocket, websocket: WebSocket):
        self.endpoint = endpoint
        self.simulator = endpoint.simulator
        self.websocket = websocket
        self.last: Conversation | None = None
        self.headers = dict(websocket.scope.get("headers") or ())     # the upgrade's (faults, seeds, limits)
        self.control = control(self.headers)
        self.generate = True            # the frame being answered's `generate`
        self.began = 0.0

    async def run(self) -> None:
        frames: asyncio.Queue = asyncio.Queue(QUEUED_FRAMES)
        worker = asyncio.create_task(self.serve(frames))
        reader = asyncio.create_task(self.read(frames))
        max_age = self.simulator.settings.ws_max_age_s
        try:
            done, _ = await asyncio.wait({worker, reader}, timeout=max_age,
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)
                await self.send_error(InvalidRequestError(
                    f"Responses websocket connection limit reached ({_duration(max_age)}). "
                    "Create a new websocket connection to continue.",
                    code="websocket_connection_limit_reached"))
                await self.websocket.close(CLOSE_NORMAL)
        except GONE:
            pass
        finally:
            for task in (worker, reader):
                task.cancel()
            await asyncio.gather(worker, reader, return_exceptions=True)

    async def read(self, frames: asyncio.Queue) -> None:
        """Queue every text (or binary) frame until the client goes away."""
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            await frames.put(text if text is not None else message.get("bytes") or b"")

    async def serve(self, frames: asyncio.Queue) -> None:
        """Answer queued frames one at a time; a bad frame gets an error event, not a close."""
        while True:
            raw = await frames.get()
            try:
                await self.respond(raw)
                if self.simulator.drain.begun:         # shutting down: the response ended with an error frame
                    await self.websocket.close(CLOSE_SHUTDOWN)
                    return
            except GONE:
                return
            except ConnectionDrop:
                await self.websocket.close(CLOSE_DROPPED)
                return
            except APIError as exc:
                await self.send_error(exc)
            except Exception:
                log.exception("unexpected error answering a WebSocket response.create")
                await self.send_error(ServerError.unexpected())

    async def respond(self, raw: str | bytes) -> None:
        """One `response.create` frame through the pipeline (llmsim.api.pipeline), sent by `send`.
        With OpenTelemetry on, a SERVER span per turn, a child of the upgrade request's traceparent."""
        tracing = self.endpoint.tracing
        turn = None if tracing is None else tracing.start("GET", self.websocket.scope.get("path", ""),
                                                          self.headers, api=TRACED_API)
        call = None
        try:
            pipeline = self.endpoint.pipeline
            start, self.began = self.simulator.clock.now(), time.perf_counter()
            if pipeline.refresh is not None:
                pipeline.refresh()          # settings changed at runtime by another process
            body, self.generate = parse_frame(raw, self.endpoint.validator)
            call = Call(adapter=self.endpoint.adapter, req=body, headers=self.headers, control=self.control,
                        start=start)
            call.extra = self           # (the connection: what the adapter's transport needs)
            await pipeline.run(call)
            if turn is not None:
                turn.set_plan(call.plan, True, call.ticket.delay if call.ticket is not None else 0.0)
            await self.send(call)
        except BaseException as exc:
            if turn is not None:
                turn.end(*_outcome(exc, call))
            raise
        if turn is not None:
            turn.end(UPGRADED, *_fault_of(call))

    async def send(self, call: Call) -> None:
        """A planned turn's events as frames, paced (slowed by the load, with a serving ticket),
        counted once sent; then remembered for the next turn."""
        simulator, plan, ticket = self.simulator, call.plan, call.ticket
        frames = call.fault.frames(self.endpoint.responses, plan=plan, req=call.req, websocket=True)
        start = call.start
        try:
            if ticket is not None:
                frames, start = ticket.timed(frames), ticket.start
            with simulator.stats.turn(plan, self.began, ticket.delay if ticket is not None else 0.0):
                await transport.ws_send(self.websocket, transport.Paced(frames, start, simulator.clock, None,
                                                                        simulator.stats.lateness, simulator.drain))
        finally:
            if ticket is not None:
                ticket.release()
        self.remember(plan, call.req, call.prior)

    async def history(self, previous_id: str | None) -> list[inputs.Turn]:
        """The conversation `previous_response_id` continues: this connection's latest response,
        else a response stored by any process (the HTTP store, `llmsim.state.responses`). This is the only
        place that resolves a previous response."""
        if previous_id is None:
            return []
        if self.last is not None and self.last.response_id == previous_id:
            return self.last.turns
        turns = await self.simulator.state.history_turns(previous_id)
        if turns is None:
            raise PreviousResponseNotFoundError(previous_id)
        return turns

    def remember(self, plan: planning.Plan, body: dict, history: list[inputs.Turn]) -> None:
        """Keep the finished response: its input and its output become the next turn's history
        (instructions are not carried over, as with HTTP `previous_response_id`)."""
        output = self.endpoint.responses.body(plan=plan, req=body)["output"]
        self.last = Conversation(plan.id, [*history, *inputs.items_turns(body.get("input"), "input"),
                                           *inputs.items_turns(output, "output")])

    async def send_error(self, exc: APIError) -> None:
        if not getattr(exc, "injected", False):       # injected faults count when they are chosen
            self.simulator.stats.error(exc.code or exc.type)
        await self.websocket.send_text(self.endpoint.ws_errors.body_json(error=exc).decode())


def _fault_of(call: Call | None) -> tuple[str | None, bool]:
    """A turn's (error.type, injected): the simulated fault chosen for it, if any (as for HTTP,
    whatever the fault then did)."""
    injection = call.fault if call is not None else None
    if injection:
        return injection.fault.kind.name, True
    return None, False


def _outcome(exc: BaseException, call: Call | None) -> tuple[int, str | None, bool]:
    """A turn that raised `exc`: its span's (status, error.type, injected)."""
    if isinstance(exc, APIError):       # an error event: its status and code
        return exc.status, exc.code or exc.type, getattr(exc, "injected", False)
    if isinstance(exc, (ConnectionDrop, *GONE)):    # a stream_drop fault, or the client left
        error, injected = _fault_of(call)
        return 0, error or "no_response", injected
    if isinstance(exc, Exception):
        return 500, "server_error", False
    return 0, "no_response", False      # cancelled: the connection's age limit, or the server stops


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} second{'s' if seconds != 1 else ''}"
