"""CPU cost of one request inside the app: no sockets, no client, no HTTP parsing.

    python bench/inproc.py                       # every workload, µs per request (best of 3)
    python bench/inproc.py resp_stream --profile # one workload, then a cProfile of it
    python bench/inproc.py chat --n 5000 --flags '{"store_max_entries": 100}'
    python bench/inproc.py --paced 100 1000      # µs per paced event with N streams open

Read it as a trend between commits on one machine. What each mode measures:
docs/benchmarks.md#benchinproc.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import pstats
import sys
import time
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmsim.app import create_app  # noqa: E402
from llmsim.server import accepting  # noqa: E402
from llmsim.server.connection import HOOKED, HOOKS, PROTOCOL  # noqa: E402
from llmsim.settings import Settings  # noqa: E402

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say something."}]}
RESP = {"model": "gpt-4o", "input": "Say something."}
WORKLOADS = {
    "chat": ("/v1/chat/completions", CHAT),
    "resp": ("/v1/responses", RESP),
    "chat_stream": ("/v1/chat/completions", {**CHAT, "stream": True}),
    "resp_stream": ("/v1/responses", {**RESP, "stream": True}),
    "resp_nostore": ("/v1/responses", {**RESP, "store": False}),
    "resp_stream_nostore": ("/v1/responses", {**RESP, "stream": True, "store": False}),
}


async def lifespan(app) -> None:
    inbox: asyncio.Queue = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    started = asyncio.Event()

    async def send(message):
        if message["type"] == "lifespan.startup.complete":
            started.set()
    asyncio.get_running_loop().create_task(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, send))
    await started.wait()


def request_scope(path: str, body: bytes) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8080),
            "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]}


def receiver(body: bytes):
    """An ASGI `receive` that delivers `body`, then, like a server, nothing until the client
    leaves."""
    delivered = False

    async def receive():
        nonlocal delivered
        if delivered:
            await asyncio.Event().wait()
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}
    return receive


def requester(app, path: str, body: bytes):
    scope = request_scope(path, body)

    async def one() -> None:
        receive = receiver(body)
        sent = []

        async def send(message):
            sent.append(message)
        await app({**scope, "state": {}}, receive, send)
        if sent[0]["status"] != 200:
            raise SystemExit(f"{path}: HTTP {sent[0]['status']}: {sent[1].get('body', b'')[:300]!r}")
    return one


async def measure(name: str, n: int, flags: dict, profile: bool, rounds: int = 1) -> float:
    """Best-of-`rounds` CPU µs per request (other load only ever slows a round down)."""
    app = create_app(Settings(**{"profile": "instant", "target_tokens": 32, **flags}))
    await lifespan(app)
    path, doc = WORKLOADS[name]
    one = requester(app, path, json.dumps(doc).encode())
    for _ in range(min(300, n)):
        await one()
    per_request = float("inf")
    for _ in range(rounds):
        began = time.process_time()
        for _ in range(n):
            await one()
        per_request = min(per_request, (time.process_time() - began) / n * 1e6)
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(n):
            await one()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
    return per_request


class CountingConnection:
    """What llmsim.server.connection reaches of a connection under `llmsim serve` (its protocol,
    request cycle, flow control and transport, in one object), counting the chunks written."""
    chunked_encoding, write_paused, disconnected, response_complete = True, False, False, False
    more_body = False           # the whole body has been read (llmsim.server.connection.body_arrived)
    on_lost = None
    default_headers: list = []      # the server's own (`date`, `server`): none here
    keep_alive = True
    chunks = 0                  # written by every connection

    def __init__(self, scope: dict):
        self.scope, self.response_started = scope, False
        self.cycle = self.flow = self.transport = self
        self.server_lines: tuple[list, bytes] = ([], b"")   # as llmsim.server.corking's protocol

    def write(self, data: bytes) -> None:
        CountingConnection.chunks += 1

    write_now = write


def paced_requester(app, body: bytes):
    async def one() -> None:
        extensions: dict = {}
        scope = {**request_scope("/v1/chat/completions", body), "state": {}, "extensions": extensions}
        connection = CountingConnection(scope)
        extensions[PROTOCOL] = weakref.ref(connection)
        extensions[HOOKS] = HOOKED          # as llmsim.server.corking's protocol installs them

        async def send(message):
            if message["type"] == "http.response.start":
                if message["status"] != 200:
                    raise SystemExit(f"paced stream: HTTP {message['status']}")
                connection.response_started = True
        await app(scope, receiver(body), send)
    return one


async def paced_cpu(streams: int, tokens: int, rounds: int) -> tuple[float, int]:
    """Least CPU seconds of `rounds` runs of `streams` concurrent paced chat streams of
    `tokens` tokens each, and the chunks one run wrote."""
    app = create_app(Settings(ttft_ms=200, tbt_ms=20, target_tokens=tokens))
    await lifespan(app)
    one = paced_requester(app, json.dumps({**CHAT, "stream": True}).encode())
    await asyncio.gather(*(one() for _ in range(20)))           # warm-up
    best, chunks = float("inf"), 0
    for _ in range(rounds):
        CountingConnection.chunks = 0
        began = time.process_time()
        await asyncio.gather(*(one() for _ in range(streams)))
        best, chunks = min(best, time.process_time() - began), CountingConnection.chunks
    return best, chunks


async def paced(counts: list[int], rounds: int) -> None:
    for streams in counts:
        full, full_chunks = await paced_cpu(streams, 50, rounds)
        short, short_chunks = await paced_cpu(streams, 1, rounds)
        per_event = (full - short) / (full_chunks - short_chunks) * 1e6
        print(f"{streams:5d} paced streams  {per_event:6.2f} µs CPU per event "
              f"({full_chunks} chunks in {full:.3f} s; a 1-token stream {short / streams * 1e6:.0f} µs)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", help=f"some of {', '.join(WORKLOADS)} (default: all)")
    p.add_argument("--n", type=int, default=3000, help="requests measured per workload")
    p.add_argument("--flags", type=json.loads, default={}, help="extra Settings as JSON")
    p.add_argument("--rounds", type=int, default=3, help="rounds of --n requests; the best counts")
    p.add_argument("--profile", action="store_true", help="print a cProfile of each workload")
    p.add_argument("--paced", type=int, nargs="+", metavar="N",
                   help="instead: CPU per paced event with N concurrent streams (see above)")
    args = p.parse_args()
    logging.disable(logging.WARNING)        # connexion's swagger-ui notice
    if args.paced:              # on the loop `llmsim serve` runs (uvloop's, when installed)
        with asyncio.Runner(loop_factory=accepting.new_event_loop) as runner:
            runner.run(paced(args.paced, args.rounds))
        return
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        p.error(f"unknown workload(s) {', '.join(sorted(unknown))}; known: {', '.join(WORKLOADS)}")
    for name in args.workloads or WORKLOADS:
        cost = asyncio.run(measure(name, args.n, args.flags, args.profile, args.rounds))
        print(f"{name:12s} {cost:8.1f} µs CPU per request")


if __name__ == "__main__":
    main()
