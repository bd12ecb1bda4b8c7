"""Slow, stalled and surplus clients against live servers (both kinds; docs/architecture.md,
"Slow, stalled and surplus clients; shutdown"):
- a client that dribbles its request head, or sends nothing, is disconnected after
  `--header-timeout`; one that stalls its body gets 408 in the envelope after `--body-timeout`,
  and its connection closes;
- a client that stops reading a stream costs bounded memory (the transport's high-water mark
  pauses the stream: nothing more is rendered); when it reads again the stream catches up,
  then goes on at the profile's gap, ending when it was planned to;
- beyond `--max-connections`, a request or WebSocket upgrade gets 503 `service_unavailable` in
  the envelope while the connections already open carry on."""
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time

import openai
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from conftest import LiveServer

pytestmark = [pytest.mark.live, pytest.mark.slow]
HEAD_S = BODY_S = 0.5
MAX = 3
MODEL = "gpt-4o"
GAP_MS, TOKENS = 4, 1000        # a 4 s stream (requests that want a shorter one cap max_output_tokens)
SHORT = 300                     # 1.2 s


@pytest.fixture(scope="module", params=["tuned", "plain"])
def server(request):
    server = LiveServer("--server", request.param, "--ttft-ms", "0", "--tbt-ms", str(GAP_MS), "--target-tokens", str(TOKENS),
                        "--header-timeout", str(HEAD_S), "--body-timeout", str(BODY_S),
                        "--max-connections", str(MAX))
    server.kind = request.param
    yield server
    server.stop()


def until_closed(sock: socket.socket, dribble: bytes = b"", every: float = 0.05, limit: float = 10) -> tuple[float, bytes]:
    """Send `dribble` a byte every `every` seconds (then nothing) until the server closes the
    connection: (seconds it took, what the server sent)."""
    sock.settimeout(every)
    started = time.monotonic()
    received = b""
    while time.monotonic() - started < limit:
        if dribble:
            try:
                sock.sendall(dribble[:1])
            except OSError:             # closed under us
                break
            dribble = dribble[1:]
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not data:
            break
        received += data
    return time.monotonic() - started, received


def test_a_client_dribbling_its_request_head_is_disconnected(server):
    head = b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n" + b"x-pad: a\r\n" * 100
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        took, received = until_closed(sock, head)
    print(f"\n--server {server.kind}: a dribbled head cut after {took:.2f} s (--header-timeout {HEAD_S})")
    assert received == b""
    assert HEAD_S * 0.8 < took < HEAD_S + 3


def test_a_client_that_connects_and_sends_nothing_is_disconnected(server):
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        took, received = until_closed(sock)
    print(f"\n--server {server.kind}: a silent connection cut after {took:.2f} s")
    assert received == b"" and HEAD_S * 0.8 < took < HEAD_S + 3


def test_a_stalled_body_gets_408_in_the_envelope_and_the_connection_closes(server):
    body = json.dumps({"model": MODEL, "input": "hello"}).encode()
    head = (b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body))
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head + body[:10])
        took, received = until_closed(sock)
    print(f"\n--server {server.kind}: a stalled body answered 408 and closed after {took:.2f} s (--body-timeout {BODY_S})")
    status, _, rest = received.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 408")
    headers, _, payload = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower()
    error = json.loads(payload)["error"]
    assert error["code"] == "request_timeout" and error["type"] == "invalid_request_error"
    assert BODY_S * 0.8 < took < BODY_S + 3


def test_a_chunked_body_dribbled_a_byte_at_a_time_gets_408_at_the_deadline(server):
    body = json.dumps({"model": MODEL, "input": "hello " * 40}).encode()
    head = (b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head)
        took, received = until_closed(sock, dribble=b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
    assert received.startswith(b"HTTP/1.1 408")
    assert json.loads(received.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
    assert BODY_S * 0.8 < took < BODY_S + 3         # from the request's start, not from each byte


def test_a_body_that_arrives_within_the_timeout_is_answered(server):
    body = json.dumps({"model": MODEL, "input": "hello", "max_output_tokens": 5}).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body[:10]))
        time.sleep(BODY_S / 3)
        sock.sendall(body[10:])
        _, received = until_closed(sock)
    assert received.startswith(b"HTTP/1.1 200")


def test_ordinary_requests_are_not_cut(server):
    client = server.client(timeout=30)
    assert client.responses.create(model=MODEL, input="hi", max_output_tokens=20).output_text
    with client.responses.create(model=MODEL, input="hi", stream=True, max_output_tokens=SHORT) as stream:
        events = [event.type for event in stream]       # 1.2 s: longer than both timeouts
    assert events[-1] == "response.incomplete" and events.count("response.output_text.delta") == SHORT


STALL_S = 2.5
DELTA = b"event: response.output_text.delta"
# 20 alternatives per token: ~5.6 KB an event, so the stall owes megabytes
BODY = json.dumps({"model": "gpt-4o", "input": "Go on.", "stream": True, "top_logprobs": 20,
                   "include": ["message.output_text.logprobs"]}).encode()


def rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def queued(port: int) -> int:
    """Bytes the kernel holds between the server and its client: the server's send queue and
    the client's receive queue."""
    total = 0
    for spec in (f"sport = :{port}", f"dport = :{port}"):
        for line in subprocess.run(["ss", "-tnH", spec], capture_output=True, text=True).stdout.splitlines():
            fields = line.split()
            total += int(fields[1]) + int(fields[2])
    return total


@pytest.fixture(scope="module")
def stalled(server):
    """A 4 s stream whose client stops reading for `STALL_S` seconds after its first bytes."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)     # a small window: the server feels it
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%s" % (len(BODY), BODY))
    started = time.monotonic()
    received = sock.recv(4096)
    before = rss_kb(server.proc.pid)
    time.sleep(STALL_S)                 # the client stops reading
    grown = rss_kb(server.proc.pid) - before
    held = queued(server.port)
    resumed = time.monotonic()
    arrivals: list[float] = []
    sock.settimeout(15)
    while b"event: response.completed" not in received[-65536:]:
        data = sock.recv(65536)
        if not data:
            break
        arrivals += [time.monotonic() - started] * data.count(DELTA)
        received += data
    sock.close()
    result = {"kind": server.kind, "grown_kb": grown, "held": held, "bytes": len(received),
              "arrivals": arrivals, "resumed": resumed - started, "received": received}
    owed = len(received) * STALL_S / (TOKENS * GAP_MS / 1000)
    print(f"\nstalled reader (--server {server.kind}): {STALL_S} s without reading owed ~{owed / 1e6:.1f} MB; "
          f"the kernel held {held / 1024:.0f} KB, the server's RSS grew {grown} KB; the stream ended "
          f"{arrivals[-1]:.2f} s after it began (planned {TOKENS * GAP_MS / 1000:.1f} s)")
    return result


def test_a_stalled_reader_costs_bounded_memory(stalled):
    owed = stalled["bytes"] * STALL_S / (TOKENS * GAP_MS / 1000)       # what fell due meanwhile
    assert owed > 3_000_000
    assert stalled["grown_kb"] * 1024 < owed / 3    # the kernel holds part of it; the server renders none of the rest


def test_every_event_arrives_once_the_reader_reads_again(stalled):
    assert stalled["received"].count(DELTA) == TOKENS
    assert b"event: response.completed" in stalled["received"]


def test_after_a_stall_the_stream_catches_up_and_ends_when_planned(stalled):
    planned = TOKENS * GAP_MS / 1000
    assert stalled["arrivals"][-1] < planned + 1.5      # not planned + the stall


def test_after_catching_up_events_come_at_the_profiles_gap(stalled):
    last = stalled["arrivals"][-100:]       # the last 0.4 s of the stream, well past the catch-up
    assert last[0] > stalled["resumed"]
    mean_gap_ms = (last[-1] - last[0]) / (len(last) - 1) * 1000    # (a read may hold several events)
    assert GAP_MS / 2 < mean_gap_ms < GAP_MS * 3      # neither a burst nor far behind (a busy machine's reader lags)


def stream_events(server, events: list) -> None:
    with server.client(timeout=30).responses.create(model=MODEL, input="Go on.", stream=True,
                                                    max_output_tokens=SHORT) as stream:
        for event in stream:
            events.append(event.type)


@pytest.fixture(scope="module")
def crowded(server):
    """`MAX` streams running, and what one request more got."""
    runs = [[] for _ in range(MAX)]
    threads = [threading.Thread(target=stream_events, args=(server, events)) for events in runs]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while not all(len(events) >= 3 for events in runs) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        server.client(timeout=10).responses.create(model=MODEL, input="One more?", max_output_tokens=5)
        refused = None
    except openai.APIStatusError as exc:
        refused = exc
    upgrade = asyncio.run(websocket_upgrade(server))
    for thread in threads:
        thread.join(30)
    return {"refused": refused, "runs": runs, "upgrade": upgrade}


async def websocket_upgrade(server):
    """What a WebSocket upgrade got: None (it was accepted) or its refusal."""
    try:
        async with connect(server.url.replace("http://", "ws://") + "/v1/responses"):
            return None
    except InvalidStatus as exc:
        return exc.response


def test_a_request_beyond_max_connections_gets_503_in_the_envelope(server, crowded):
    refused = crowded["refused"]
    assert refused is not None and refused.status_code == 503
    assert refused.body["code"] == "service_unavailable" and refused.body["type"] == "server_error"
    assert refused.response.headers["connection"] == "close"
    assert refused.response.headers["content-type"] == "application/json"


def test_a_websocket_upgrade_beyond_max_connections_gets_503_in_the_envelope(server, crowded):
    refused = crowded["upgrade"]
    assert refused is not None and refused.status_code == 503
    assert json.loads(refused.body)["error"]["code"] == "service_unavailable"


def test_the_connections_already_open_are_unaffected(server, crowded):
    for events in crowded["runs"]:
        assert events[-1] == "response.incomplete" and events.count("response.output_text.delta") == SHORT


def test_once_the_crowd_has_gone_requests_are_served_again(server, crowded):
    assert server.client(timeout=10).responses.create(model=MODEL, input="Now?", max_output_tokens=5).output_text
