"""llmsim at a glance: throughput and timing of POST /v1/responses (a benchmark, not a test).

    python bench/bench.py                         # every workload, about a minute
    python bench/bench.py --only paced --streams 500
    python bench/bench.py --duration 10 --workers 64

Each workload starts llmsim from this checkout on a free loopback port and drives it with a
small asyncio HTTP/1.1 client in this process. WORKLOADS maps a name to a function(args) ->
rows. The workloads and the client: docs/benchmarks.md#benchbench.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import orjson

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
BODY = {"model": "gpt-4o", "input": "Benchmark this."}
PACED_TTFT_MS, PACED_TBT_MS, PACED_TOKENS = 200, 20, 50
DELTA = b"event: response.output_text.delta"
COMPLETED = b"event: response.completed"
now = time.perf_counter


@dataclass
class Row:
    workload: str
    metric: str
    value: str
    note: str = ""


# ---- the server under test -------------------------------------------------------------

@dataclass
class Server:
    port: int
    pid: int

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used so far (Linux /proc)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _raise_file_limit() -> None:
    """Hundreds of concurrent streams need more descriptors than the usual 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))


@contextlib.contextmanager
def llmsim(*flags: str) -> Iterator[Server]:
    """`llmsim serve FLAGS` on a free port, stopped on exit."""
    port = _free_port()
    cmd = [sys.executable, "-m", "llmsim", "serve", "--port", str(port), "--log-level", "warning", *flags]
    proc = subprocess.Popen(cmd, cwd=REPO, preexec_fn=_raise_file_limit,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llmsim exited: {proc.stderr.read().decode()[-2000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://{HOST}:{port}/health", timeout=1) as reply:
                    if reply.status == 200:
                        break
            if time.monotonic() > deadline:
                raise RuntimeError("llmsim did not become healthy within 60 s")
            time.sleep(0.1)
        yield Server(port, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


# ---- a lean HTTP/1.1 client -------------------------------------------------------------------

class Connection:
    """One keep-alive connection: POST a JSON body, read the reply (Content-Length or chunked)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int):
        self.reader, self.writer, self.port = reader, writer, port

    @classmethod
    async def open(cls, port: int) -> "Connection":
        reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 20)
        return cls(reader, writer, port)

    def request(self, path: str, body: dict) -> bytes:
        payload = orjson.dumps(body)
        return (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload

    async def post(self, request: bytes, on_chunk: Callable[[bytes], None] | None = None) -> tuple[int, bytes]:
        """Send one prepared request; returns (status, body). `on_chunk` sees each body chunk as
        it arrives (chunked replies: one per chunk the server wrote)."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        if b"transfer-encoding: chunked" in lower:
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                chunk = (await self.reader.readexactly(size + 2))[:-2]
                if on_chunk:
                    on_chunk(chunk)
                parts.append(chunk)
            return status, b"".join(parts)
        start = lower.index(b"content-length:") + 15
        length = int(lower[start:lower.index(b"\r\n", start)])
        body = await self.reader.readexactly(length)
        if on_chunk:
            on_chunk(body)
        return status, body

    def close(self) -> None:
        self.writer.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def _cpu_note(server: Server, server_cpu: float, client_cpu: float, elapsed: float) -> str:
    """Who was busy: CPU seconds per wall second of the server and of this client."""
    return (f"CPU/s: server {(server.cpu_seconds() - server_cpu) / elapsed:.2f}, "
            f"client {(time.process_time() - client_cpu) / elapsed:.2f}")


# ---- throughput ------------------------------------------------------------------------------

async def _throughput(server: Server, workers: int, duration: float, warmup: float, stream: bool):
    request_body = {**BODY, "stream": True} if stream else BODY
    connections = [await Connection.open(server.port) for _ in range(workers)]

    async def run(seconds: float):
        latencies, errors = [], 0
        stop = now() + seconds

        async def worker(connection: Connection):
            nonlocal errors
            request = connection.request("/v1/responses", request_body)
            while now() < stop:
                began = now()
                status, body = await connection.post(request)
                if status == 200 and (not stream or COMPLETED in body[-4096:]):
                    latencies.append(now() - began)
                else:
                    errors += 1
        began, server_cpu, client_cpu = now(), server.cpu_seconds(), time.process_time()
        await asyncio.gather(*(worker(c) for c in connections))
        elapsed = now() - began
        return latencies, errors, elapsed, _cpu_note(server, server_cpu, client_cpu, elapsed)
    try:
        await run(warmup)
        return await run(duration)
    finally:
        for connection in connections:
            connection.close()


def _throughput_rows(name: str, args, stream: bool) -> list[Row]:
    with llmsim("--profile", "instant", "--target-tokens", str(args.tokens)) as server:
        latencies, errors, elapsed, cpu = _run(
            _throughput(server, args.workers, args.duration, args.warmup, stream))
    what = "complete streams/s" if stream else "requests/s"
    rows = [Row(name, what, f"{len(latencies) / elapsed:,.0f}",
                f"{args.workers} connections, {args.duration:g} s, {args.tokens}-token replies")]
    if latencies:
        rows.append(Row(name, "latency p50 / p99", f"{percentile(latencies, 50) * 1000:.1f} / "
                                                     f"{percentile(latencies, 99) * 1000:.1f} ms", cpu))
    rows.append(Row(name, "errors", str(errors)))
    return rows


def responses(args) -> list[Row]:
    return _throughput_rows("responses", args, stream=False)


def responses_stream(args) -> list[Row]:
    return _throughput_rows("responses-stream", args, stream=True)


# ---- paced streams ------------------------------------------------------------------------------

async def _paced(server: Server, streams: int):
    """Open every connection, then start every stream together; per stream (TTFT, gaps) in
    seconds as this client read the text deltas, or None when it failed."""
    connections = []
    for _ in range(streams):
        connections.append(await Connection.open(server.port))
    request = connections[0].request("/v1/responses", {**BODY, "stream": True})
    await connections[0].post(request)  # warm the server up (first-request costs)

    async def one(connection: Connection):
        stamps: list[float] = []

        def on_chunk(chunk: bytes) -> None:
            at = now()
            stamps.extend([at] * chunk.count(DELTA))
        began = now()
        status, body = await connection.post(request, on_chunk)
        if status != 200 or COMPLETED not in body or not stamps:
            return None
        return stamps[0] - began, [b - a for a, b in zip(stamps, stamps[1:])]
    began, server_cpu, client_cpu = now(), server.cpu_seconds(), time.process_time()
    results = await asyncio.gather(*(one(c) for c in connections), return_exceptions=True)
    cpu = _cpu_note(server, server_cpu, client_cpu, now() - began)
    for connection in connections:
        connection.close()
    return [r for r in results if isinstance(r, tuple)], cpu


def paced(args) -> list[Row]:
    flags = ("--ttft-ms", str(PACED_TTFT_MS), "--tbt-ms", str(PACED_TBT_MS), "--target-tokens", str(PACED_TOKENS))
    with llmsim(*flags) as server:
        done, cpu = _run(_paced(server, args.streams))
    name = "paced"
    rows = [Row(name, "completed streams", f"{len(done)} / {args.streams}",
                f"{PACED_TTFT_MS} ms TTFT, {PACED_TBT_MS} ms gaps, {PACED_TOKENS} tokens; {cpu}")]
    if not done:
        return rows
    ttfts = [ttft * 1000 for ttft, _ in done]
    gaps = [gap * 1000 for _, stream_gaps in done for gap in stream_gaps]
    for label, values, target in (("TTFT", ttfts, PACED_TTFT_MS), ("gap", gaps, PACED_TBT_MS)):
        for q in (50, 99):
            value = percentile(values, q)
            rows.append(Row(name, f"{label} p{q}", f"{value:.1f} ms",
                            f"error {value - target:+.1f} ms ({(value - target) / target:+.1%})"))
    rows.append(Row(name, "gap mean", f"{statistics.mean(gaps):.2f} ms", f"over {len(gaps):,} gaps"))
    return rows


# ---- the table ------------------------------------------------------------------------------------

WORKLOADS: dict[str, Callable[[argparse.Namespace], list[Row]]] = {
    "responses": responses,
    "responses-stream": responses_stream,
    "paced": paced,
}


def _run(coroutine):
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def print_table(rows: list[Row]) -> None:
    headers = Row("workload", "metric", "value", "setup / error vs configured / CPU")
    widths = [max(len(getattr(r, f)) for r in [headers, *rows]) for f in ("workload", "metric", "value")]
    for i, row in enumerate([headers, *rows]):
        print(f"{row.workload:<{widths[0]}}  {row.metric:<{widths[1]}}  {row.value:>{widths[2]}}  {row.note}".rstrip())
        if i == 0:
            print("-" * (sum(widths) + 6 + len(headers.note)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(WORKLOADS), help="run this workload (repeatable)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per throughput workload (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up before measuring (default 1)")
    parser.add_argument("--workers", type=int, default=32, help="concurrent connections of the throughput runs (default 32)")
    parser.add_argument("--tokens", type=int, default=32, help="reply length of the throughput runs (default 32)")
    parser.add_argument("--streams", type=int, default=200, help="concurrent paced streams (default 200)")
    args = parser.parse_args(argv)
    _raise_file_limit()
    print(f"llmsim benchmark: {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} before the run")
    rows: list[Row] = []
    for name in args.only or WORKLOADS:
        rows += WORKLOADS[name](args)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
