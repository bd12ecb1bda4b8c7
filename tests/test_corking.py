"""`llmsim serve`'s HTTP protocol (llmsim.corking) on a real event loop, fed raw bytes: a
paced stream's chunks reach the connection in HTTP chunked framing, and while the client
reads slowly (the transport paused writing) nothing more is written until it drains, and
when the client leaves the stream ends at once."""
from __future__ import annotations

import asyncio

import orjson
import uvicorn
from uvicorn.server import ServerState

from llmsim.clock import Clock
from llmsim.corking import CorkedHttpToolsProtocol
from llmsim.templates import Event
from llmsim.transport import Paced, SSEResponse

GAP = 0.005
N = 20
REQUEST = b"POST /stream HTTP/1.1\r\nHost: sim\r\nContent-Length: 2\r\n\r\n{}"


class Transport(asyncio.Transport):
    """What the protocol writes, in order; `closed` once it closes."""

    def __init__(self):
        super().__init__()
        self.data = bytearray()
        self.closed = False

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data):
        self.data += data

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


def paced_app(n: int):
    async def app(scope, receive, send):
        events = (Event("e", {"i": i}, i * GAP) for i in range(n))
        await SSEResponse(Paced(events, Clock().now(), Clock()))(scope, receive, send)
    return app


def connect(n: int = N) -> tuple[CorkedHttpToolsProtocol, Transport]:
    config = uvicorn.Config(paced_app(n), http=CorkedHttpToolsProtocol, lifespan="off",
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
    await asyncio.wait_for(asyncio.gather(*protocol.tasks), 5)
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
    await asyncio.wait_for(asyncio.gather(*protocol.tasks), 5)
    assert body_of(bytes(transport.data)) == (list(range(N)), True)


async def test_a_client_that_leaves_ends_its_stream_at_once():
    protocol, transport = connect(n=2000)        # 10 s of events
    await asyncio.sleep(GAP * 4)
    protocol.connection_lost(None)
    written = len(transport.data)
    await asyncio.wait_for(asyncio.gather(*protocol.tasks), 0.5)
    assert len(transport.data) == written
    assert body_of(bytes(transport.data))[1] is False     # no last chunk: it just stopped
