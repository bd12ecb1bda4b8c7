"""The front door (llmsim.api.front) behind `llmsim serve`'s protocol (llmsim.server.corking), fed raw
bytes: a JSON answer leaves whole in one write, with the observer's headers, and the
connection stays open for the next request, or closes after an HTTP/1.0 answer."""
from __future__ import annotations

import asyncio

import orjson
import uvicorn
from uvicorn.server import ServerState

from llmsim.app import create_app
from llmsim.server.corking import CorkedHttpToolsProtocol
from llmsim.settings import Settings
from rawprotocol import Transport, handled

BODY = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})


def request(version: bytes = b"1.1", body: bytes = BODY) -> bytes:
    return (b"POST /v1/chat/completions HTTP/" + version + b"\r\nHost: sim\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def connect(transport: Transport | None = None, **config) -> tuple[CorkedHttpToolsProtocol, Transport]:
    app = create_app(Settings(profile="instant", target_tokens=5))
    config = uvicorn.Config(app, http=CorkedHttpToolsProtocol, lifespan="off", log_level="warning",
                            **config)
    protocol = CorkedHttpToolsProtocol(config=config, server_state=ServerState(), app_state={},
                                       _loop=asyncio.get_running_loop())
    transport = transport or Transport()
    protocol.connection_made(transport)
    return protocol, transport


async def answered(protocol, transport, raw: bytes) -> bytes:
    """What the protocol wrote for one request (its loop step's writes out)."""
    before = len(transport.writes)
    protocol.data_received(raw)
    await handled(protocol)
    await asyncio.sleep(0)
    return b"".join(transport.writes[before:])


def parts(raw: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    return status, dict(line.split(b": ", 1) for line in lines), body


async def test_a_json_answer_leaves_whole_in_one_write_with_the_observers_headers():
    protocol, transport = connect()
    protocol.data_received(request())
    await handled(protocol)
    await asyncio.sleep(0)
    assert len(transport.writes) == 1
    status, headers, body = parts(transport.writes[0])
    assert status == b"HTTP/1.1 200 OK"
    assert int(headers[b"content-length"]) == len(body)
    assert orjson.loads(body)["object"] == "chat.completion"
    assert headers[b"x-request-id"].startswith(b"req_")
    assert headers[b"x-llmsim-tokens"] == b"5"


async def test_a_long_answer_says_its_length_and_token_count_exactly():
    protocol, transport = connect()
    raw = await answered(protocol, transport, request(body=orjson.dumps(
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "n": 40})))
    status, headers, body = parts(raw)
    assert len(body) > 5000 and int(headers[b"content-length"]) == len(body)
    assert headers[b"x-llmsim-tokens"] == b"200"           # 5 tokens in each of 40 choices


async def test_the_connection_serves_the_next_request_after_a_json_answer():
    protocol, transport = connect()
    first = parts(await answered(protocol, transport, request()))
    second = parts(await answered(protocol, transport, request()))
    assert (first[0], second[0]) == (b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK")
    assert first[1][b"x-request-id"] != second[1][b"x-request-id"]
    assert not transport.closed


async def closed_by(transport, deadline: float) -> None:
    """Until `transport` is closed; fails at loop time `deadline`."""
    loop = asyncio.get_running_loop()
    while not transport.closed:
        assert loop.time() < deadline, "the connection is still open"
        await asyncio.sleep(0.01)


async def test_a_connection_left_idle_after_a_json_answer_closes_after_the_keep_alive_timeout():
    protocol, transport = connect(timeout_keep_alive=0.05)
    await answered(protocol, transport, request())
    await closed_by(transport, asyncio.get_running_loop().time() + 10)


class Timed(Transport):
    """The test transport, noting the loop time it was closed at."""
    closed_at: float | None = None

    def close(self):
        if not self.closed:
            self.closed_at = asyncio.get_running_loop().time()
        super().close()


KEEP_ALIVE = 1.5    # far longer than the 0.2 s pauses between requests


async def keep_alive_run(protocol, transport) -> bool:
    """Requests 0.2 s apart for longer than the keep-alive timeout, then none: whether the
    connection stayed open throughout (False: the machine stalled this process for the
    whole timeout, and the connection rightly closed). Every close must come a whole
    timeout after the request before it was sent: its answer ended later still."""
    loop = asyncio.get_running_loop()
    first = None
    while first is None or loop.time() - first < KEEP_ALIVE + 0.3:   # past the first answer's timer
        sent = loop.time()
        first = first or sent
        await answered(protocol, transport, request())
        await asyncio.sleep(0.2)
        if transport.closed:
            assert transport.closed_at - sent >= KEEP_ALIVE - 0.01, "closed while in use"
            return False
    await closed_by(transport, deadline=sent + KEEP_ALIVE + 10)
    assert transport.closed_at - sent >= KEEP_ALIVE - 0.01, "closed before the timeout after the last answer"
    return True


async def test_a_connection_in_use_stays_open_and_closes_a_keep_alive_timeout_after_its_last_answer():
    runs = []
    while not any(runs) and len(runs) < 3:      # a run cut short by a stall proves nothing: again
        protocol, transport = connect(timeout_keep_alive=KEEP_ALIVE, transport=Timed())
        runs.append(await keep_alive_run(protocol, transport))
    assert any(runs), "every run stalled for a whole keep-alive timeout"


async def test_an_http_1_0_answer_says_the_connection_closes_and_closes_it():
    protocol, transport = connect()
    status, headers, body = parts(await answered(protocol, transport, request(b"1.0")))
    assert status == b"HTTP/1.1 200 OK"
    assert headers[b"connection"] == b"close"
    assert int(headers[b"content-length"]) == len(body)
    assert transport.closed


async def test_an_error_answer_leaves_whole_with_its_envelope():
    protocol, transport = connect()
    status, headers, body = parts(await answered(protocol, transport, request(body=b'{"model": "gpt-4o"}')))
    assert status == b"HTTP/1.1 400 Bad Request"
    assert orjson.loads(body)["error"]["param"] == "messages"
    assert headers[b"x-request-id"].startswith(b"req_")


async def test_pipelined_requests_are_answered_in_order():
    protocol, transport = connect()
    protocol.data_received(request() + request(body=b'{"model": "gpt-4o"}'))
    for _ in range(50):                     # the second starts when the first is answered
        await asyncio.sleep(0.01)
        if transport.data.count(b"HTTP/1.1 ") == 2:
            break
    first, _, second = bytes(transport.data).partition(b"HTTP/1.1 400")
    assert first.startswith(b"HTTP/1.1 200 OK") and second


async def test_a_streams_head_carries_the_observers_headers_and_its_body_is_chunked():
    protocol, transport = connect()
    raw = await answered(protocol, transport, request(body=orjson.dumps(
        {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]})))
    status, headers, body = parts(raw)
    assert status == b"HTTP/1.1 200 OK"
    assert headers[b"transfer-encoding"] == b"chunked"
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert headers[b"x-llmsim-tokens"] == b"5"
    assert body.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
