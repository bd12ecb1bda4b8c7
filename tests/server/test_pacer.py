"""The shared timer that paces every SSE stream of an app (llmsim.pacing.pacer), on a real loop:
events leave in order and never before they are due, a client whose buffer is full holds
only its own stream back, and drops and keep-alives behave as in a stream paced by a task."""
from __future__ import annotations

import asyncio
import itertools
import time

import orjson
import pytest

from llmsim.api.front import Front
from llmsim.clock import Clock
from llmsim.errors import ConnectionDrop
from llmsim.pacing.draining import Drain
from llmsim.pacing.pacer import PacedStream, send_now
from llmsim.pacing.transport import Paced, SSEResponse
from llmsim.render.sse import framed
from llmsim.render.templates import Event
from llmsim.server import accepting
from llmsim.settings import Settings
from llmsim.simulator import Simulator

GAP = 0.005


def events(n: int, gap: float = GAP, first: float = 0.0):
    return (Event("e", {"i": i}, first + i * gap) for i in range(n))


def frames(sent: list[dict]) -> list[bytes]:
    return [m["body"] for m in sent if m["type"] == "http.response.body" and m["body"]]


@pytest.fixture
def drain() -> Drain:
    """An app's shutdown and pacers (`Simulator.drain`): the streams of one test share its timer."""
    return Drain()


async def respond(paced: Paced, send) -> None:
    async def receive():
        await asyncio.Event().wait()
    await SSEResponse(paced)({"type": "http"}, receive, send)


async def test_a_send_that_does_not_wait_completes_at_once():
    sent = []

    async def send(message):
        sent.append(message)
    assert send_now(send, {"n": 1}) is None
    assert sent == [{"n": 1}]


async def test_a_send_that_waits_for_the_client_completes_when_awaited():
    drained = asyncio.get_running_loop().create_future()
    sent = []

    async def send(message):
        await drained               # the transport's buffer is full
        sent.append(message)
    rest = send_now(send, {"n": 1})
    assert rest is not None and sent == []
    asyncio.get_running_loop().call_later(0.01, drained.set_result, None)
    await rest
    assert sent == [{"n": 1}]


async def test_many_interleaved_streams_write_every_event_in_order_and_never_early(drain):
    clock = Clock()
    logs: dict[int, list] = {}

    async def one(k: int):
        start = clock.now()
        log = logs[k] = []

        async def send(message):
            if message["type"] == "http.response.body" and message["body"]:
                log.append((clock.now() - start, message["body"]))
        await respond(Paced(framed(events(12, first=0.001 * (k % 7))), start, clock, drain=drain), send)
    await asyncio.gather(*(one(k) for k in range(200)))
    for k, log in logs.items():
        data = b"".join(body for _, body in log)
        numbers = [orjson.loads(line[6:])["i"] for line in data.split(b"\n") if line.startswith(b"data: ")]
        assert numbers == list(range(12))
        first_due = 0.001 * (k % 7)
        assert all(at >= first_due - 1e-6 for at, _ in log)


async def test_a_blocked_client_holds_back_only_its_own_stream(drain):
    clock = Clock()
    drained = asyncio.get_running_loop().create_future()
    slow, fast = [], []

    async def slow_send(message):
        if message["type"] == "http.response.body" and message["body"] and not frames(slow):
            await drained           # the first event's write waits for the client
        slow.append(message)

    async def fast_send(message):
        fast.append(message)
    start = clock.now()
    slow_task = asyncio.ensure_future(respond(Paced(framed(events(5)), start, clock, drain=drain), slow_send))
    # the fast stream ends (generous bound: the machine may be busy), in as many writes as
    # the timer took to reach its events: all five events are there
    await asyncio.wait_for(respond(Paced(framed(events(5)), start, clock, drain=drain), fast_send), 30)
    assert b"".join(frames(fast)).count(b"event: e\n") == 5
    assert frames(slow) == [] and not slow_task.done()
    drained.set_result(None)
    await asyncio.wait_for(slow_task, 30)
    assert b"".join(frames(slow)).count(b"event: e\n") == 5


async def test_a_drop_sends_what_was_due_then_ends_the_stream_with_the_drop(drain):
    clock = Clock()

    def dropping():
        yield from events(3)
        raise ConnectionDrop()
    sent = []

    async def send(message):
        sent.append(message)
    with pytest.raises(ConnectionDrop):
        await respond(Paced(framed(dropping()), clock.now(), clock, drain=drain), send)
    assert b"".join(frames(sent)).count(b"event: e\n") == 3
    assert not any(m.get("more_body") is False for m in sent)     # the body never ends


async def test_keepalive_comments_go_out_before_the_first_event_only(drain):
    clock = Clock()
    sent = []

    async def send(message):
        sent.append(message)
    await respond(Paced(framed(events(3, first=0.3)), clock.now(), clock, keepalive=0.012, drain=drain), send)
    bodies = frames(sent)
    comments = [b for b in bodies if b.startswith(b": ")]
    assert len(comments) >= 3
    assert bodies.index(comments[-1]) < bodies.index(next(b for b in bodies if b.startswith(b"event")))


async def test_keepalive_comments_go_out_while_waiting_even_after_an_event_went_out_at_once(drain):
    clock = Clock()
    sent = []

    async def send(message):
        sent.append(message)
    created = Event("created", {"i": -1}, 0.0)           # like response.created, due at once
    stream = itertools.chain([created], events(2, first=0.3))
    await respond(Paced(framed(stream), clock.now(), clock, keepalive=0.012, drain=drain), send)
    bodies = frames(sent)
    assert bodies[0].startswith(b"event: created")
    assert sum(b.startswith(b": ") for b in bodies[1:]) >= 3


def paced_on_timer(app: Front, written: list, first_due_in: float) -> None:
    """A stream on `app`'s shared timer whose one event is due `first_due_in` seconds from now."""
    clock = Clock()
    start = clock.now() + first_due_in
    app.drain.pacers.get().add(PacedStream(framed(events(1)), start, written.extend, None, None, clock), start)


def observed(app) -> Front:
    """`app` behind the front door every API request goes through (on to `app`: no route
    of its own)."""
    return Front(app, simulator=Simulator.load(Settings(metrics=False)), operations={}, websockets=None,
                 render_error=None, base_paths=("/v1",))


async def call(app) -> None:
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        pass
    await app(scope, receive, send)     # never waits: the loop runs no timer meanwhile


async def test_a_request_starting_lets_overdue_streams_write_before_it_is_handled():
    """A burst of requests runs in one loop step, between two firings of the timer."""
    written: list = []
    seen_by_handler = []

    async def handler(scope, receive, send):
        seen_by_handler.append(len(written))
    app = observed(handler)
    paced_on_timer(app, written, first_due_in=-0.01)
    await call(app)
    assert seen_by_handler == [1]


async def test_a_request_ending_lets_streams_write_what_fell_due_while_it_ran():
    written: list = []

    async def busy_handler(scope, receive, send):
        time.sleep(0.01)            # holds the loop, as a heavy request or a burst of them does
    app = observed(busy_handler)
    paced_on_timer(app, written, first_due_in=0.002)
    await call(app)
    assert len(written) == 1


@pytest.mark.skipif(accepting.uvloop is None, reason="uvloop is not installed")
def test_a_stream_due_after_a_burst_of_requests_in_one_loop_step_is_written_on_time():
    """uvloop sleeps until its next timer counting from its clock's last reading, which
    without the requests' own readings is from before the burst."""
    async def streaming_handler(scope, receive, send):
        time.sleep(0.01)                            # planning and the first chunk
        await asyncio.get_running_loop().create_future()       # then it streams on
    app = observed(streaming_handler)

    async def burst_then_first_token() -> float:
        clock = Clock()
        due = clock.now() + 2.0                     # well after the burst, even on a busy machine
        written_at: list[float] = []
        stream = PacedStream(framed(events(1)), due, lambda batch: written_at.append(clock.now()),
                             None, None, clock)
        app.drain.pacers.get().add(stream, due)
        burst = [asyncio.create_task(call(app)) for _ in range(60)]    # 600 ms in one step
        await stream.done
        for request in burst:
            request.cancel()
        await asyncio.gather(*burst, return_exceptions=True)
        return written_at[0] - due
    loop = accepting.new_event_loop()
    try:
        late = loop.run_until_complete(burst_then_first_token())
    finally:
        loop.close()
    assert late < 0.3                               # not the burst's 600 ms (or more)


async def test_a_stream_closed_by_its_response_stops_drawing_events():
    drawn = []

    def counted():
        for event in events(100, gap=0.01):
            drawn.append(event)
            yield event
    written = []
    clock = Clock()
    stream = PacedStream(framed(counted()), clock.now(), lambda batch: written.append(batch), None, None, clock)
    stream.step(clock.now())
    stream.close()
    assert len(drawn) <= 2 and stream.closed


def test_a_client_that_stops_reading_gets_the_whole_stream_when_it_reads_again(live_server_factory):
    """Its writes wait for the socket (flow control) while every other stream goes on."""
    import socket
    import time
    server = live_server_factory("--ttft-ms", "5", "--tbt-ms", "0.01", "--target-tokens", "16000")
    body = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        data = sock.recv(1024)
        time.sleep(1.5)                 # ~4 MB are due meanwhile: far more than the socket holds
        while not data.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(1 << 16)
            assert chunk, "the server closed the stream"
            data += chunk
    assert data.startswith(b"HTTP/1.1 200")
    assert data.count(b'"delta":{"content":"') == 16000 and b"data: [DONE]" in data
