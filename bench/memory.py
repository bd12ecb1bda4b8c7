"""Server memory holding N idle streams: RSS idle, with the streams open (and the peak while
opening them), and per stream.

Starts `python -m llmsim serve` (a long --ttft-ms, so no stream sends a token), sends one
warm-up request, reads the RSS of the server's process tree, then opens N streaming
requests on N connections and waits until every one has its response headers (the server
has planned it and is waiting for the first token) before reading the RSS again.

usage: python bench/memory.py [--n 1000] [--api chat|responses] [--model gpt-4o] [-- serve flags]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import procstat  # noqa: E402
import servers  # noqa: E402

MB = 1024 * 1024
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}


def request(api: str, model: str, port: int) -> bytes:
    doc = ({"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
           if api == "chat" else {"model": model, "stream": True, "input": "hi"})
    body = json.dumps(doc).encode()
    return (f"POST {PATHS[api]} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def open_streams(port: int, payload: bytes, n: int, timeout: float) -> list:
    """N connections, each with its request sent and its response headers read."""
    gate = asyncio.Semaphore(200)       # connecting at once

    async def one():
        async with gate:
            reader, writer = await asyncio.open_connection(servers.HOST, port)
        writer.write(payload)
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode(errors="replace")[:200])
        return writer
    return await asyncio.wait_for(asyncio.gather(*(one() for _ in range(n))), timeout)


async def measure(server, args) -> dict:
    payload = request(args.api, args.model, server.port)
    warm = await open_streams(server.port, payload, 1, 30)
    for writer in warm:
        writer.close()
    procstat.wait_idle(server.pid)
    idle = procstat.rss_bytes(server.pid)
    began = time.perf_counter()
    with procstat.Sampler(server.pid, 0.02) as sampler:
        writers = await open_streams(server.port, payload, args.n, 120)
        opened = time.perf_counter() - began
        await asyncio.sleep(0.5)
        procstat.wait_idle(server.pid)
        held = procstat.rss_bytes(server.pid)
    for writer in writers:
        writer.close()
    return {"idle": idle, "held": held, "peak": max(sampler.peak, held), "opened_s": opened}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1000, help="idle streams held open")
    p.add_argument("--api", choices=sorted(PATHS), default="chat")
    p.add_argument("--model", default="gpt-4o")
    p.add_argument("--ttft-ms", type=float, default=600_000)
    p.add_argument("serve_flags", nargs="*", help="extra `llmsim serve` flags (after --)")
    args = p.parse_args()
    servers.raise_nofile()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.n + 64:
        sys.exit(f"open-file limit {soft} is too low for {args.n} streams")
    flags = ["--ttft-ms", f"{args.ttft_ms:g}", "--tbt-ms", "20", "--target-tokens", "50", *args.serve_flags]
    with servers.llmsim(*flags) as server:
        out = asyncio.run(measure(server, args))
    idle, held, peak = out["idle"] / MB, out["held"] / MB, out["peak"] / MB
    print(f"{args.n} idle {args.api} streams ({args.model}), opened in {out['opened_s']:.1f} s")
    print(f"{'RSS idle MB':>12} {'with streams':>13} {'peak':>7} {'KB per stream':>14}")
    print(f"{idle:12.1f} {held:13.1f} {peak:7.1f} {(held - idle) * 1024 / args.n:14.1f}")


if __name__ == "__main__":
    main()
