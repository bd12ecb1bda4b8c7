"""A client that stops reading a stream for a while (both servers): the server holds only a
bounded amount for it (the transport's high-water mark pauses the stream: nothing more is
rendered), and when it reads again the stream catches up, then goes on at the profile's gap,
ending when it was planned to (docs/architecture.md, "Slow, stalled and surplus clients")."""
from __future__ import annotations

import json
import socket
import statistics
import subprocess
import time

import pytest

from conftest import LiveServer

GAP_MS, TOKENS = 4, 1000        # a 4 s stream
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


@pytest.fixture(scope="module", params=["tuned", "plain"])
def stalled(request):
    server = LiveServer("--server", request.param, "--ttft-ms", "0", "--tbt-ms", str(GAP_MS),
                        "--target-tokens", str(TOKENS))
    try:
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
        result = {"kind": request.param, "grown_kb": grown, "held": held, "bytes": len(received),
                  "arrivals": arrivals, "resumed": resumed - started, "received": received}
        owed = len(received) * STALL_S / (TOKENS * GAP_MS / 1000)
        print(f"\nstalled reader (--server {request.param}): {STALL_S} s without reading owed ~{owed / 1e6:.1f} MB; "
              f"the kernel held {held / 1024:.0f} KB, the server's RSS grew {grown} KB; the stream ended "
              f"{arrivals[-1]:.2f} s after it began (planned {TOKENS * GAP_MS / 1000:.1f} s)")
        yield result
    finally:
        server.stop()


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
    arrivals = stalled["arrivals"]
    late = [t for t in arrivals if t > stalled["resumed"] + 0.5]    # past the catch-up burst
    gaps = [b - a for a, b in zip(late, late[1:])]
    assert len(gaps) > 50
    assert GAP_MS / 2 < statistics.median(gaps) * 1000 < GAP_MS * 2
