"""`llmsim serve`'s HTTP protocol (llmsim.server.corking) on a real event loop, fed raw bytes: a
paced stream's chunks reach the connection in HTTP chunked framing, and while the client
reads slowly (the transport paused writing) nothing more is written until it drains, and
when the client leaves the stream ends at once."""
from __future__ import annotations

import asyncio
import time

import orjson
import uvicorn
from uvicorn.server import ServerState

from llmsim.clock import Clock
from llmsim.pacing.draining import Drain
from llmsim.pacing.transport import Paced, SSEResponse
from llmsim.render.sse import framed
from llmsim.render.templates import Event
from llmsim.server.context import RECEIVED_AT
from llmsim.server.corking import CorkedHttpToolsProtocol
from rawprotocol import Transport, handled

GAP = 0.005
N = 20
REQUEST = b"POST /stream HTTP/1.1\r\nHost: sim\r\nContent-Length: 2\r\n\r\n{}"


# `Transport` and `handled`: tests/rawprotocol.py (tests/server/test_front.py uses them too)


def paced_app(n: int, gap: float = GAP, start: float | None = None, drawn=None, drain: Drain | None = None):
    """Streams of n events `gap` apart from `start` (default: the request); `drawn(i)` is
    called as the stream takes event i from its template. One app: its own `drain` (its
    pacers) unless given another app's."""
    def events():
        for i in range(n):
            if drawn is not None:
                drawn(i)
            yield Event("e", {"i": i}, i * gap)

    drain = drain or Drain()        # the app's shutdown and pacers (as `Simulator.drain`)

    async def app(scope, receive, send):
        began = Clock().now() if start is None else start
        await SSEResponse(Paced(framed(events()), began, Clock(), drain=drain))(scope, receive, send)
    return app


def connect(n: int = N, app=None) -> tuple[CorkedHttpToolsProtocol, Transport]:
    config = uvicorn.Config(app or paced_app(n), http=CorkedHttpToolsProtocol, lifespan="off",
                            log_level="warning")
    protocol = CorkedHttpToolsProtocol(config=config, server_state=ServerState(), app_state={},
                                       _loop=asyncio.get_running_loop())
    transport = Transport()
    protocol.connection_made(transport)
    protocol.data_received(REQUEST)
    return protocol, transport


def body_of(raw: bytes) -> tuple[list[int], bool]:
    """The `i` of every event in a chunked HTTP response, and whether its last chunk came."""
    _, _, rest = raw.partition(b"\r\n\r\n")
    body = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return _events(body), True
        body, rest = body + rest[:size], rest[size + 2:]
    return _events(body), False


def _events(body: bytes) -> list[int]:
    return [orjson.loads(line[6:])["i"] for line in body.split(b"\n") if line.startswith(b"data: ")]


async def test_a_paced_stream_reaches_the_connection_as_a_chunked_response():
    protocol, transport = connect()
    await handled(protocol)
    assert transport.data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"transfer-encoding: chunked\r\n" in transport.data
    assert body_of(bytes(transport.data)) == (list(range(N)), True)


async def test_nothing_is_written_while_the_client_reads_slowly_and_all_of_it_after():
    protocol, transport = connect()
    await asyncio.sleep(GAP * 4)
    protocol.pause_writing()                    # as the transport does when its buffer is full
    await asyncio.sleep(0.01)                   # the write due now went out in the step before
    held = len(transport.data)
    await asyncio.sleep(GAP * 8)
    assert len(transport.data) == held
    protocol.resume_writing()
    await handled(protocol)
    assert body_of(bytes(transport.data)) == (list(range(N)), True)


async def test_a_client_that_leaves_ends_its_stream_at_once():
    protocol, transport = connect(n=2000)        # 10 s of events
    await asyncio.sleep(GAP * 4)
    protocol.connection_lost(None)
    written = len(transport.data)
    await handled(protocol, timeout=0.5)
    assert len(transport.data) == written
    assert body_of(bytes(transport.data))[1] is False     # no last chunk: it just stopped


async def test_an_instant_stream_leaves_in_one_write():
    protocol, transport = connect(app=paced_app(5, gap=0))
    await handled(protocol)
    await asyncio.sleep(0)                      # the loop step's writes go out after it
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert body_of(transport.writes[0]) == ([0, 1, 2, 3, 4], True)


async def test_streams_due_together_each_leave_before_the_next_is_rendered():
    """Where one timer finds many streams due, a stream's token does not wait while the
    others are rendered: each is written as soon as it is made."""
    order: list[str] = []
    # both streams' first events due at once, later: well after both requests have started,
    # even the first ones of a fresh process on a busy machine (its first request is slow)
    start = Clock().now() + 0.5
    drain = Drain()                             # one app's: its one timer finds both due
    pairs = []
    for name in "ab":
        protocol, transport = connect(app=paced_app(2, gap=0.05, start=start, drain=drain,
                                                     drawn=lambda i, name=name: order.append(f"draw {name}{i}")))
        real_write = transport.write
        transport.write = lambda data, name=name, real_write=real_write: (
            order.append(f"write {name}"), real_write(data))
        pairs.append((protocol, transport))
    await handled(*(p for p, _ in pairs))
    assert order[:2] == ["draw a0", "draw b0"]  # both started before their first event was due
    # a stream draws its next event (here 1) while writing the due one (0)
    due_together = order[order.index("draw a1"):order.index("draw a1") + 4]
    assert due_together == ["draw a1", "write a", "draw b1", "write b"]


async def test_a_request_read_behind_a_slow_one_is_stamped_before_the_slow_one_is_handled():
    """Requests that arrive together start their simulated time together: a request whose
    read comes after another's (here: the next callback of the loop, as the next read of
    sockets would) is stamped before that other request's handling blocks the loop."""
    received: dict[str, float] = {}

    async def app(scope, receive, send):
        received[scope["path"]] = scope["extensions"][RECEIVED_AT]
        if scope["path"] == "/slow":
            time.sleep(0.2)             # a handler that holds the loop
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config = uvicorn.Config(app, http=CorkedHttpToolsProtocol, lifespan="off", log_level="warning")
    loop = asyncio.get_running_loop()
    protocols = []
    for path in ("/slow", "/next"):
        protocol = CorkedHttpToolsProtocol(config=config, server_state=ServerState(), app_state={},
                                           _loop=loop)
        protocol.connection_made(Transport())
        protocols.append((protocol, f"GET {path} HTTP/1.1\r\nHost: sim\r\n\r\n".encode()))
    slow, following = protocols
    slow[0].data_received(slow[1])
    loop.call_soon(following[0].data_received, following[1])
    deadline = loop.time() + 10
    while len(received) < 2 and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert received["/next"] - received["/slow"] < 0.1      # not after the slow one's 0.2 s


async def test_a_stream_outlasting_the_keep_alive_timeout_is_not_cut():
    """The keep-alive timer armed by an earlier answer fires while a later stream runs: the
    connection is busy, so it stays open until the stream ends."""
    quick, slow = paced_app(1, gap=0), paced_app(30, gap=0.01)

    async def app(scope, receive, send):
        await (quick if scope["path"] == "/quick" else slow)(scope, receive, send)
    config = uvicorn.Config(app, http=CorkedHttpToolsProtocol, lifespan="off", log_level="warning",
                            timeout_keep_alive=0.05)
    protocol = CorkedHttpToolsProtocol(config=config, server_state=ServerState(), app_state={},
                                       _loop=asyncio.get_running_loop())
    transport = Transport()
    protocol.connection_made(transport)
    protocol.data_received(b"GET /quick HTTP/1.1\r\nHost: sim\r\n\r\n")
    await handled(protocol)
    await asyncio.sleep(0.02)
    before = len(transport.data)
    protocol.data_received(b"GET /stream HTTP/1.1\r\nHost: sim\r\n\r\n")
    await handled(protocol)
    assert not transport.closed
    assert body_of(bytes(transport.data[before:])) == (list(range(30)), True)


def recording_app(seen: list):
    """Answers 200 with an empty body; `seen` gets (scope, every message `receive` gave
    before the answer)."""
    async def app(scope, receive, send):
        messages = [await receive()]
        while messages[-1].get("more_body"):
            messages.append(await receive())
        seen.append((scope, messages))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
    return app


async def test_a_body_read_in_several_pieces_reaches_the_app_whole():
    seen: list = []
    protocol, transport = connect(app=recording_app(seen))
    await handled(protocol)
    protocol.data_received(b"POST /more HTTP/1.1\r\nHost: sim\r\nContent-Length: 11\r\n\r\n{\"a\":")
    await asyncio.sleep(0.01)
    protocol.data_received(b"\"bcd\"}")
    await handled(protocol)
    _, messages = seen[1]
    assert b"".join(m["body"] for m in messages) == b'{"a":"bcd"}'
    assert messages[-1]["more_body"] is False


async def test_after_the_whole_body_receive_waits_until_the_client_leaves():
    heard: list = []

    async def app(scope, receive, send):
        heard.append(await receive())
        heard.append(await receive())
    protocol, _ = connect(app=app)
    await asyncio.sleep(0.05)
    assert heard == [{"type": "http.request", "body": b"{}", "more_body": False}]
    protocol.connection_lost(None)
    await asyncio.sleep(0)
    assert heard[1] == {"type": "http.disconnect"}


async def test_the_scope_carries_the_decoded_path_and_the_query_of_each_request():
    seen: list = []
    protocol, _ = connect(app=recording_app(seen))
    for target in (b"/v1/a%20b?x=1", b"/v1/a%20b?x=1", b"/v1/c"):
        protocol.data_received(b"GET " + target + b" HTTP/1.1\r\nHost: sim\r\n\r\n")
        await handled(protocol)
    got = [(s["method"], s["path"], s["raw_path"], s["query_string"]) for s, _ in seen]
    assert got == [("POST", "/stream", b"/stream", b""), ("GET", "/v1/a b", b"/v1/a%20b", b"x=1"),
                   ("GET", "/v1/a b", b"/v1/a%20b", b"x=1"), ("GET", "/v1/c", b"/v1/c", b"")]


async def test_pipelined_requests_are_answered_in_order():
    seen: list = []
    protocol, transport = connect(app=recording_app(seen))
    protocol.data_received(b"GET /second HTTP/1.1\r\nHost: sim\r\n\r\nGET /third HTTP/1.1\r\nHost: sim\r\n\r\n")
    for _ in range(3):
        await handled(protocol)
    assert [s["path"] for s, _ in seen] == ["/stream", "/second", "/third"]
    assert transport.data.count(b"HTTP/1.1 200 OK\r\n") == 3
