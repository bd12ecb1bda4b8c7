"""CPU cost of one request inside the app: no sockets, no client, no HTTP parsing.

    python bench/inproc.py                       # every workload, µs per request (best of 3)
    python bench/inproc.py resp_stream --profile # one workload, then a cProfile of it
    python bench/inproc.py chat --n 5000 --flags '{"store_max_entries": 100}'

Requests go straight into `create_app(Settings(profile="instant", target_tokens=32))`
(the W1-W4 settings of bench/perf.py), so the figure is llmsim's own cost per request;
uvicorn adds ~20 µs on top. Read it as a trend between commits on one machine.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmsim.app import create_app  # noqa: E402
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


def requester(app, path: str, body: bytes):
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8080),
             "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}

    async def one() -> None:
        delivered = False

        async def receive():
            nonlocal delivered
            if delivered:           # like a server: nothing more until the client leaves
                await asyncio.Event().wait()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", help=f"some of {', '.join(WORKLOADS)} (default: all)")
    p.add_argument("--n", type=int, default=3000, help="requests measured per workload")
    p.add_argument("--flags", type=json.loads, default={}, help="extra Settings as JSON")
    p.add_argument("--rounds", type=int, default=3, help="rounds of --n requests; the best counts")
    p.add_argument("--profile", action="store_true", help="print a cProfile of each workload")
    args = p.parse_args()
    logging.disable(logging.WARNING)        # connexion's swagger-ui notice
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        p.error(f"unknown workload(s) {', '.join(sorted(unknown))}; known: {', '.join(WORKLOADS)}")
    for name in args.workloads or WORKLOADS:
        cost = asyncio.run(measure(name, args.n, args.flags, args.profile, args.rounds))
        print(f"{name:12s} {cost:8.1f} µs CPU per request")


if __name__ == "__main__":
    main()
