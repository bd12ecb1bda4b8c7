"""Lean asyncio client for paced streams: N concurrent SSE requests, timed token by token.

Each stream is an `asyncio.Protocol` on its own connection, with one clock read per
`data_received`; each stream's TTFT is measured from when its own request was written.
Measure mode prints `PACED_JSON {...}` (TTFT and gap percentiles, completed fraction, errors);
`--hold S` keeps the streams open for a caller sampling server memory.

usage: python bench/paced.py URL [--api chat|responses] [--n 100] [--model gpt-4o] [--hold S]
More: docs/benchmarks.md#benchpaced.
"""
from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from collections import Counter
from urllib.parse import urlsplit

import orjson

now = time.perf_counter
KINDS = {
    "chat": ("/v1/chat/completions", b'"content"', b"[DONE]"),
    "responses": ("/v1/responses", b"output_text.delta", b'"response.completed"'),
}


class Stream(asyncio.Protocol):
    """One request; fills `tokens` with arrival times and resolves `done` when it ends."""

    def __init__(self, kind: str, loop: asyncio.AbstractEventLoop):
        self.kind = kind
        _, self.token_hint, self.end_hint = KINDS[kind]
        self.done = loop.create_future()
        self.transport = None
        self.buf = b""
        self.sse = b""
        self.in_head = True
        self.chunked = False
        self.status: int | None = None
        self.sent: float | None = None
        self.headers_at: float | None = None
        self.tokens: list[float] = []
        self.completed = False
        self.error: str | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self, request: bytes) -> None:
        self.sent = now()
        self.transport.write(request)

    def finish(self, error: str | None = None) -> None:
        if not self.done.done():
            if error and not self.completed:
                self.error = error
            self.done.set_result(None)
            if self.transport:
                self.transport.close()

    def connection_lost(self, exc) -> None:
        self.finish("closed before the end of the stream" if exc is None else f"connection lost: {exc}")

    def data_received(self, data: bytes) -> None:
        t = now()
        self.buf += data
        if self.in_head:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head, self.buf = self.buf[:i].lower(), self.buf[i + 4:]
            self.in_head = False
            self.headers_at = t
            self.status = int(head.split(None, 2)[1])
            self.chunked = b"transfer-encoding: chunked" in head
            if self.status != 200:
                return self.finish(f"HTTP {self.status}")
        ended = False
        if self.chunked:
            buf = self.buf
            while (i := buf.find(b"\r\n")) >= 0:
                size = int(buf[:i].split(b";")[0], 16)
                if len(buf) < i + size + 4:
                    break
                if size == 0:
                    ended = True
                    break
                self.sse += buf[i + 2:i + 2 + size]
                buf = buf[i + size + 4:]
            self.buf = buf
        else:
            self.sse += self.buf
            self.buf = b""
        if b"\r" in self.sse:
            self.sse = self.sse.replace(b"\r\n", b"\n")
        while (j := self.sse.find(b"\n\n")) >= 0:
            event, self.sse = self.sse[:j], self.sse[j + 2:]
            self.on_event(event, t)
        if ended:
            self.finish("body ended without the end event")

    def on_event(self, event: bytes, t: float) -> None:
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if self.token_hint in data and self.is_token(orjson.loads(data)):
                self.tokens.append(t)
            elif self.end_hint in data and self.is_end(data):
                self.completed = True
                self.finish()

    def is_token(self, doc) -> bool:
        if self.kind == "chat":
            choices = doc.get("choices") or [{}]
            return bool((choices[0].get("delta") or {}).get("content"))
        return doc.get("type") == "response.output_text.delta"

    def is_end(self, data: bytes) -> bool:
        if self.kind == "chat":
            return data == b"[DONE]"
        return orjson.loads(data).get("type") == "response.completed"


def percentiles(values: list[float]) -> dict | None:
    if not values:
        return None
    s = sorted(values)
    pick = lambda q: s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]   # nearest rank
    return {"n": len(s), "p50": pick(50), "p90": pick(90), "p99": pick(99), "max": s[-1],
            "mean": sum(s) / len(s)}


def summary(streams: list[Stream], wall: float) -> dict:
    ttft = [(s.tokens[0] - s.sent) * 1e3 for s in streams if s.tokens and s.sent]
    heads = [(s.headers_at - s.sent) * 1e3 for s in streams if s.headers_at and s.sent]
    gaps = [(b - a) * 1e3 for s in streams for a, b in zip(s.tokens, s.tokens[1:])]
    tokens = [len(s.tokens) for s in streams]
    completed = sum(s.completed for s in streams)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"n": len(streams), "completed": completed, "completed_fraction": completed / len(streams),
            "errors": dict(Counter(s.error or "unfinished" for s in streams if not s.completed)),
            "ttft_ms": percentiles(ttft), "gap_ms": percentiles(gaps), "headers_ms": percentiles(heads),
            "tokens_per_stream": {"min": min(tokens), "max": max(tokens)},
            "wall_s": wall, "client_cpu_s": usage.ru_utime + usage.ru_stime}


def request_bytes(url: str, api: str, model: str) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    path = (parts.path.rstrip("/") or "") + KINDS[api][0]
    if api == "chat":
        body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    else:
        body = {"model": model, "stream": True, "input": "hi"}
    raw = orjson.dumps(body)
    head = (f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Authorization: Bearer sk-bench\r\nContent-Length: {len(raw)}\r\n\r\n")
    return parts.hostname, parts.port, head.encode() + raw


async def run(args) -> dict:
    loop = asyncio.get_running_loop()
    host, port, request = request_bytes(args.url, args.api, args.model)
    streams = [Stream(args.api, loop) for _ in range(args.n)]
    gate = asyncio.Semaphore(200)

    async def connect(stream: Stream) -> None:
        async with gate:
            try:
                await loop.create_connection(lambda: stream, host, port)
            except OSError as exc:
                stream.finish(f"connect: {exc}")

    await asyncio.gather(*(connect(s) for s in streams))
    start = now()
    for s in streams:
        if s.transport and not s.done.done():
            s.send(request)
    if args.hold:
        await asyncio.sleep(args.hold)
        print("HOLDING", sum(not s.done.done() for s in streams), flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
        result = {"n": args.n, "open": sum(not s.done.done() for s in streams),
                  "errors": dict(Counter(s.error for s in streams if s.error))}
        for s in streams:
            if s.transport:
                s.transport.close()
        return result
    await asyncio.wait([s.done for s in streams], timeout=args.timeout)
    wall = now() - start
    for s in streams:
        s.finish("timeout")
    return summary(streams, wall)


def main() -> None:
    p = argparse.ArgumentParser(description="N concurrent paced SSE streams, measured client-side")
    p.add_argument("url", help="server root, e.g. http://127.0.0.1:8080")
    p.add_argument("--api", choices=sorted(KINDS), default="chat")
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--model", default="gpt-4o")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for all streams")
    p.add_argument("--hold", type=float, help="keep streams open this long, then wait for stdin")
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.n * 2 + 256)), hard))
    try:
        import uvloop
        result = uvloop.run(run(args))
    except ImportError:
        result = asyncio.run(run(args))
    print("PACED_JSON " + orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main()
