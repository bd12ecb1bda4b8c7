"""Abusive and broken clients against a live server: clients that vanish mid-stream leave
nothing behind, and bodies nested too deep, too large or not UTF-8 get 400 / 413 envelopes."""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from conftest import LiveServer

pytestmark = pytest.mark.live

MODEL = "gpt-4o"
STREAM = json.dumps({"model": MODEL, "input": "Go on.", "stream": True}).encode()


@pytest.fixture(scope="module", params=["tuned", "plain"])
def server(request):
    server = LiveServer("--server", request.param, "--ttft-ms", "0", "--tbt-ms", "20", "--target-tokens", "100",
                        "--max-body-bytes", "1000000")
    server.kind = request.param
    yield server
    server.stop()


def rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def active_streams(server) -> int:
    return httpx.get(server.url + "/llmsim/stats", timeout=10).json()["requests"]["active_streams"]


async def vanish(port: int) -> bool:
    """Start a stream, read its first bytes, and leave without a word; True if it had started."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%s" % (len(STREAM), STREAM))
    started = b"200" in await asyncio.wait_for(reader.read(4096), 30)
    writer.transport.abort()        # a reset, as a client that crashed
    return started


async def vanish_many(port: int, count: int, at_once: int = 200) -> int:
    started = 0
    for first in range(0, count, at_once):
        started += sum(await asyncio.gather(*(vanish(port) for _ in range(min(at_once, count - first)))))
    return started


def wait_until_idle(server, timeout: float = 30) -> float:
    started = time.monotonic()
    while active_streams(server) and time.monotonic() - started < timeout:
        time.sleep(0.05)
    return time.monotonic() - started


def test_a_thousand_vanishing_stream_clients_leave_nothing_behind(server):
    asyncio.run(vanish_many(server.port, 200))      # warm-up: allocators and caches settle
    wait_until_idle(server)
    before = rss_kb(server.proc.pid)
    assert asyncio.run(vanish_many(server.port, 1000)) == 1000
    idle_after = wait_until_idle(server)
    assert active_streams(server) == 0
    after = rss_kb(server.proc.pid)
    print(f"\n1000 vanished streams (--server {server.kind}): active_streams 0 within {idle_after:.2f} s; "
          f"RSS {before / 1024:.1f} -> {after / 1024:.1f} MB ({(after - before) / before * 100:+.1f}%)")
    assert after <= before * 1.10
    stats = httpx.get(server.url + "/llmsim/stats", timeout=10).json()
    assert stats["requests"]["active"] == 0
    # and the server answers as before
    answer = httpx.post(server.base + "/responses", json={"model": MODEL, "input": "hi"}, timeout=30)
    assert answer.status_code == 200


def post_raw(server, body: bytes) -> httpx.Response:
    return httpx.post(server.base + "/responses", content=body,
                      headers={"content-type": "application/json"}, timeout=30)


def assert_envelope(answer: httpx.Response, status: int) -> dict:
    assert answer.status_code == status, answer.text[:300]
    assert answer.headers["content-type"].startswith("application/json")
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    return error


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_deep_nesting_is_a_400(server, depth):
    body = b'{"model": "gpt-4o", "input": "hi", "metadata": ' + b"[" * depth + b"]" * depth + b"}"
    assert_envelope(post_raw(server, body), 400)


def test_a_body_over_the_limit_is_a_413(server):
    body = json.dumps({"model": MODEL, "input": "x" * 2_000_000}).encode()
    assert_envelope(post_raw(server, body), 413)


@pytest.mark.parametrize("body", [b'{"model": "gpt-4o", "input": "\xff\xfe bad"}',
                                  b'\xc3\x28{"model": "gpt-4o"}',
                                  b'{"model": "gpt-4o", "input": "\xed\xa0\x80"}'])
def test_invalid_utf8_is_a_400(server, body):
    assert_envelope(post_raw(server, body), 400)
