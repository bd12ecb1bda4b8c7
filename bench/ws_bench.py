"""Responses WebSocket mode under load: many connections, each running several chained turns.

All connections are opened first (at most 200 handshakes at once); then every connection
sends its turns one after another, each turn continuing the previous one with
`previous_response_id`, as an agent loop would. A turn ends at `response.completed` (or an
`error` event, counted as an error). Events are not JSON-decoded except the terminal one.

Reported: turns/s and events/s over the turn phase, first-event latency (send to the first
frame back, i.e. `response.created`) and first-token latency (send to the first
`response.output_text.delta`), p50/p99 in ms, plus errors and refused connections.

usage: python bench/ws_bench.py URL [--connections 100] [--turns 5] [--model gpt-4o]
  URL: the server root (http://127.0.0.1:8080) or a ws:// URL of the responses path.
As a library: `run(url, connections, turns) -> dict` (the same numbers).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from urllib.parse import urlsplit

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus, WebSocketException

now = time.perf_counter
HANDSHAKES_AT_ONCE = 200


def responses_url(url: str) -> str:
    """ws(s)://host:port/v1/responses from a server root or an explicit ws URL."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    if not path.endswith("/responses"):
        path = (path if path.endswith("/v1") else path + "/v1") + "/responses"
    return f"{scheme}://{parts.netloc}{path}"


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Tally:
    def __init__(self):
        self.turns = self.events = self.errors = self.refused = 0
        self.first_event: list[float] = []
        self.first_token: list[float] = []


async def _open(url: str, gate: asyncio.Semaphore, tally: Tally):
    async with gate:
        try:
            return await connect(url, max_size=None, ping_interval=None)
        except InvalidStatus:
            tally.refused += 1
        except (OSError, WebSocketException):
            tally.errors += 1
        return None


async def _converse(ws, turns: int, model: str, start: asyncio.Event, tally: Tally) -> None:
    await start.wait()
    previous = None
    try:
        for i in range(turns):
            frame = {"type": "response.create", "model": model, "input": f"turn {i}"}
            if previous:
                frame["previous_response_id"] = previous
            sent = now()
            await ws.send(json.dumps(frame))
            first = True
            token_seen = False
            while True:
                message = await ws.recv()
                tally.events += 1
                if first:
                    tally.first_event.append(now() - sent)
                    first = False
                if not token_seen and "output_text.delta" in message:
                    tally.first_token.append(now() - sent)
                    token_seen = True
                if '"response.completed"' in message or '"type":"error"' in message:
                    break
            event = json.loads(message)
            if event["type"] == "error":
                tally.errors += 1
                previous = None
            else:
                tally.turns += 1
                previous = event["response"]["id"]
    except (OSError, WebSocketException):
        tally.errors += 1
    finally:
        await ws.close()


async def run_async(url: str, connections: int, turns: int, model: str = "gpt-4o") -> dict:
    target = responses_url(url)
    tally = Tally()
    gate = asyncio.Semaphore(HANDSHAKES_AT_ONCE)
    opened = await asyncio.gather(*(_open(target, gate, tally) for _ in range(connections)))
    sockets = [ws for ws in opened if ws is not None]
    start = asyncio.Event()
    tasks = [asyncio.create_task(_converse(ws, turns, model, start, tally)) for ws in sockets]
    began = now()
    start.set()
    await asyncio.gather(*tasks)
    seconds = now() - began

    def ms(values, q):
        value = percentile(values, q)
        return None if value is None else round(value * 1000, 2)
    return {
        "url": target, "connections": connections, "connected": len(sockets), "turns_per_connection": turns,
        "seconds": round(seconds, 3), "turns": tally.turns, "events": tally.events,
        "turns_per_s": round(tally.turns / seconds, 1) if seconds else None,
        "events_per_s": round(tally.events / seconds, 1) if seconds else None,
        "first_event_ms": {"p50": ms(tally.first_event, 0.50), "p99": ms(tally.first_event, 0.99)},
        "first_token_ms": {"p50": ms(tally.first_token, 0.50), "p99": ms(tally.first_token, 0.99)},
        "errors": tally.errors, "refused": tally.refused,
    }


def run(url: str, connections: int, turns: int, model: str = "gpt-4o") -> dict:
    """Run the benchmark to completion (own event loop) and return its numbers."""
    return asyncio.run(run_async(url, connections, turns, model))


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("--connections", type=int, default=100)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--model", default="gpt-4o")
    args = p.parse_args(argv)
    _raise_fd_limit()
    result = run(args.url, args.connections, args.turns, args.model)
    print(f"{result['connected']}/{args.connections} connections x {args.turns} turns: "
          f"{result['turns_per_s']} turns/s, {result['events_per_s']} events/s, first event "
          f"p50 {result['first_event_ms']['p50']} ms p99 {result['first_event_ms']['p99']} ms, "
          f"errors {result['errors']}, refused {result['refused']}")
    print("WS_JSON " + json.dumps(result))
    return 0 if result["errors"] == 0 and result["refused"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
