"""`llmsim record`: a proxy to an OpenAI-compatible server that writes each exchange as a fixture.

Every request goes to the upstream (its root URL plus the request's path and query) and its
answer comes back unchanged, an SSE stream chunk by chunk as it arrives. Each POST to a
Responses or Chat Completions route is also written to the output directory as a fixture
(llmsim.replay.fixtures) once its answer has ended: the JSON body, or the SSE events each
with the time it arrived, counted from when the request was sent upstream.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from llmsim.replay import fixtures

log = logging.getLogger("llmsim.record")
# Request headers not passed on (the proxy's own connection, and encodings: bodies are kept
# as plain bytes); response headers not passed back (the proxy frames its own answer).
DROP_REQUEST = frozenset({"host", "content-length", "connection", "accept-encoding", "transfer-encoding"})
DROP_RESPONSE = frozenset({"content-length", "connection", "transfer-encoding", "content-encoding",
                           "keep-alive", "date", "server"})
KEPT_HEADERS = ("content-type", "retry-after")      # what a fixture keeps of the response's headers
UNSAVED_WAIT_S = 5.0        # how long a follow-up waits for the exchanges still being written


class Relayed(StreamingResponse):
    """A relayed answer whose relay ends (and writes its fixture) as the response does, even
    when its client left: Starlette then cancels the sending, and the relay's generator would
    otherwise wait for the garbage collector to be closed."""

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()


class Exchange:
    """One recorded exchange, fed the answer's bytes as they arrive."""

    def __init__(self, endpoint: str, body: dict, path: str, parent: str | None, status: int, headers):
        self.endpoint, self.body, self.path, self.status = endpoint, body, path, status
        self.key = fixtures.key(endpoint, body, parent)
        self.headers = {k: headers[k] for k in KEPT_HEADERS if k in headers}
        self.streamed = headers.get("content-type", "").startswith("text/event-stream")
        self.buffer = b""
        self.events: list[dict] = []
        self.ended_at = 0.0

    def feed(self, chunk: bytes, at: float) -> None:
        self.buffer += chunk
        self.ended_at = at
        if self.streamed and b"\r" in self.buffer:      # CRLF line ends (some servers'): as LF
            self.buffer = self.buffer.replace(b"\r\n", b"\n")
        while self.streamed:
            end = self.buffer.find(b"\n\n")
            if end < 0:
                break
            block, self.buffer = self.buffer[:end], self.buffer[end + 2:]
            event = _event(block.decode("utf-8", errors="replace"), at)
            if event is not None:
                self.events.append(event)

    def whole(self, headers) -> bool:
        """All of the answer arrived, though its relay was cancelled as the client, which has
        read it all, moved on: a JSON body's `content-length` bytes, or a stream's last event."""
        if self.streamed:
            return bool(self.events) and _final(self.events[-1])
        length = headers.get("content-length")
        return length is not None and length.isdigit() and len(self.buffer) == int(length)

    def fixture(self, recorded_at: float) -> dict:
        response: dict = {"status": self.status, "headers": self.headers}
        if self.streamed:
            response["events"] = self.events
        else:
            try:
                response["body"] = json.loads(self.buffer)
            except ValueError:
                response["text"] = self.buffer.decode("utf-8", errors="replace")
            response["t"] = round(self.ended_at, 4)
        return {"llmsim_fixture": fixtures.FORMAT, "key": self.key, "endpoint": self.endpoint,
                "model": self.body.get("model"), "recorded_at": int(recorded_at),
                "request": {"path": self.path, "body": self.body}, "response": response}


FINAL_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete", "message_stop"})


def _final(event: dict) -> bool:
    """A stream's last event: Chat's and completions' `[DONE]`, Responses' and Anthropic's
    closing event, a Gemini chunk whose every candidate has its finishReason."""
    data = event["data"]
    if data == "[DONE]" or event.get("event") in FINAL_EVENTS:
        return True
    if not isinstance(data, dict):
        return False
    candidates = data.get("candidates")
    return data.get("type") in FINAL_EVENTS or (
        isinstance(candidates, list) and bool(candidates)
        and all(isinstance(c, dict) and c.get("finishReason") for c in candidates))


def _event(block: str, at: float) -> dict | None:
    name, data = None, []
    for line in block.splitlines():
        if line.startswith(":"):
            continue                            # a comment (a keep-alive)
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    if not data:
        return None
    raw = "\n".join(data)
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw                            # e.g. [DONE]
    event = {"t": round(at, 4), "data": parsed}
    if name is not None:
        event["event"] = name
    return event


def create_recorder(upstream: str, out: str | Path) -> Starlette:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    client = httpx.AsyncClient(base_url=upstream.rstrip("/"), trust_env=False,
                               timeout=httpx.Timeout(None, connect=10))
    state = {"number": fixtures.next_number(out)}
    parents: dict[str, str] = {}        # upstream response id -> the key of its exchange
    unsaved: set[asyncio.Event] = set()  # exchanges relayed but not yet written (set when written)

    async def proxy(request: Request):
        body = await request.body()
        headers = [(k, v) for k, v in request.headers.items() if k not in DROP_REQUEST]
        url = httpx.URL(path=request.url.path, query=request.url.query.encode())
        sent = client.build_request(request.method, url, headers=[*headers, ("accept-encoding", "identity")],
                                    content=body)
        began = time.monotonic()
        try:
            answer = await client.send(sent, stream=True)
        except httpx.HTTPError as exc:
            return JSONResponse({"error": {"message": f"llmsim record: the upstream {upstream} did not answer: "
                                           f"{exc.__class__.__name__} {exc}", "type": "server_error",
                                           "param": None, "code": "upstream_unreachable"}}, status_code=502)
        # A client may send its next request as soon as it has read a stream's last event,
        # before the stream's end is relayed and its exchange written: the fixture's number is
        # its request's place, and a follow-up (`previous_response_id`) waits for what is
        # still being written, to find its parent's key.
        if unsaved and b"previous_response_id" in body:
            await asyncio.wait([asyncio.ensure_future(e.wait()) for e in unsaved], timeout=UNSAVED_WAIT_S)
        exchange = _exchange(request, body, answer, parents)
        number, state["number"] = state["number"], state["number"] + 1
        written = asyncio.Event()

        async def relay():
            ended = False
            unsaved.add(written)
            try:
                async for chunk in answer.aiter_raw():
                    if exchange is not None:
                        exchange.feed(chunk, time.monotonic() - began)
                    yield chunk
                ended = True
            finally:
                await answer.aclose()
                if exchange is not None and (ended or exchange.whole(answer.headers)):   # one cut short is not
                    _save(exchange, out, number, parents)       # a fixture; a whole body is, if the relay
                                                                # was cancelled after its last chunk
                unsaved.discard(written)
                written.set()
        passed = {k: v for k, v in answer.headers.items() if k not in DROP_RESPONSE}
        return Relayed(relay(), status_code=answer.status_code, headers=passed)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await client.aclose()

    route = Route("/{path:path}", proxy, methods=["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"])
    return Starlette(routes=[route], lifespan=lifespan)


def _exchange(request: Request, body: bytes, answer: httpx.Response, parents: dict) -> Exchange | None:
    endpoint = fixtures.endpoint_of(request.url.path)
    if request.method != "POST" or endpoint is None:
        return None
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    parsed = fixtures.request_of(endpoint, request.url.path, parsed)
    previous = parsed.get("previous_response_id") if endpoint == "responses" else None
    parent = parents.get(previous, previous) if previous else None
    return Exchange(endpoint, parsed, request.url.path, parent, answer.status_code, answer.headers)


def _save(exchange: Exchange, out: Path, number: int, parents: dict) -> None:
    fixture = exchange.fixture(time.time())
    path = fixtures.write(out, number, fixture)
    if (rid := fixtures.response_id(fixture)) is not None:
        parents[rid] = exchange.key
    log.info("recorded %s", path)
