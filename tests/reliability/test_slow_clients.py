"""Slow and surplus clients against live servers (both kinds): a client that dribbles its
request head, or sends nothing, is disconnected after `--header-timeout`; one that stalls its
body gets 408 in the envelope after `--body-timeout`, and its connection closes; beyond
`--max-connections`, a request gets 503 `service_unavailable` in the envelope while the
connections already open carry on."""
from __future__ import annotations

import json
import socket
import threading
import time

import openai
import pytest

from conftest import LiveServer

HEAD_S = BODY_S = 0.5
MAX = 3
MODEL = "gpt-4o"


@pytest.fixture(scope="module", params=["tuned", "plain"])
def server(request):
    server = LiveServer("--server", request.param, "--ttft-ms", "0", "--tbt-ms", "40", "--target-tokens", "40",
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


def test_ordinary_requests_are_not_cut(server):
    client = server.client(timeout=30)
    assert client.responses.create(model=MODEL, input="hi").status == "completed"
    with client.responses.create(model=MODEL, input="hi", stream=True) as stream:      # 1.6 s > both timeouts
        assert [event.type for event in stream][-1] == "response.completed"


def stream_events(server, events: list) -> None:
    with server.client(timeout=30).responses.create(model=MODEL, input="Go on.", stream=True) as stream:
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
        server.client(timeout=10).responses.create(model=MODEL, input="One more?")
        refused = None
    except openai.APIStatusError as exc:
        refused = exc
    for thread in threads:
        thread.join(30)
    return {"refused": refused, "runs": runs}


def test_a_request_beyond_max_connections_gets_503_in_the_envelope(server, crowded):
    refused = crowded["refused"]
    assert refused is not None and refused.status_code == 503
    assert refused.body["code"] == "service_unavailable" and refused.body["type"] == "server_error"
    assert refused.response.headers["connection"] == "close"
    assert refused.response.headers["content-type"] == "application/json"


def test_the_connections_already_open_are_unaffected(server, crowded):
    for events in crowded["runs"]:
        assert events[-1] == "response.completed" and events.count("response.output_text.delta") == 40


def test_once_the_crowd_has_gone_requests_are_served_again(server, crowded):
    assert server.client(timeout=10).responses.create(model=MODEL, input="Now?").status == "completed"
