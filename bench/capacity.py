"""How many paced streams one llmsim process can carry: the server CPU one paced event costs.

Runs N concurrent paced chat streams (bench/paced.py) against two servers that differ only
in reply length, 1 token and `--tokens` tokens, and reads each server's CPU time around each
run. The difference, divided by the extra events, is the cost of one event (rendering it,
the shared timer, the socket write); the 1-token run is the cost of the requests themselves.
From it: the events per second one busy core sustains, and so how many streams at `--tbt-ms`
gaps one worker carries. For scale it also times the floor under any server: a plain
`socket.send` of a chunk-sized message on each of N loopback connections, read by another
process, one round per gap.

usage: python bench/capacity.py [--n 1000] [--tokens 50] [--tbt-ms 20] [--runs 3] [-- serve flags]
"""
from __future__ import annotations

import argparse
import os
import selectors
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import procstat  # noqa: E402
import servers  # noqa: E402

BENCH = Path(__file__).resolve().parent
CHUNK = 180          # bytes of a chat content chunk on the wire (SSE line and chunked framing)


def server_cpu(n: int, tokens: int, args) -> tuple[list[float], str]:
    """Server CPU seconds of each of `args.runs` runs of N paced streams, and the command."""
    flags = ["--ttft-ms", f"{args.ttft_ms:g}", "--tbt-ms", f"{args.tbt_ms:g}",
             "--target-tokens", str(tokens), *args.serve_flags]
    runs = []
    with servers.llmsim(*flags) as server:
        cmd = [sys.executable, str(BENCH / "paced.py"), server.url, "--n", str(n), "--timeout", "120"]
        subprocess.run(cmd, capture_output=True, check=True, timeout=180)      # warm-up run
        for _ in range(args.runs):
            procstat.wait_idle(server.pid)
            before = procstat.cpu_seconds(server.pid)
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            if '"completed_fraction":1.0' not in out.stdout:
                sys.exit(f"not every stream completed:\n{out.stdout[-400:]}{out.stderr[-400:]}")
            runs.append(procstat.cpu_seconds(server.pid) - before)
        return runs, server.command


def send_floor(n: int, rounds: int, gap_s: float) -> float:
    """Median seconds per `send` of CHUNK bytes over N loopback connections (one send each per
    round, a round every `gap_s`), with a reader process draining them."""
    listener = socket.create_server((servers.HOST, 0), backlog=n)
    port = listener.getsockname()[1]
    reader = os.fork()
    if reader == 0:                          # the client: connect N, read until every byte came
        try:
            conns = [socket.create_connection((servers.HOST, port)) for _ in range(n)]
            selector = selectors.DefaultSelector()
            for conn in conns:
                selector.register(conn, selectors.EVENT_READ)
            left = n * rounds * CHUNK
            while left > 0:
                for key, _ in selector.select():
                    left -= len(key.fileobj.recv(65536))
        finally:
            os._exit(0)
    conns = [listener.accept()[0] for _ in range(n)]
    for conn in conns:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    message, per_send = b"x" * CHUNK, []
    for _ in range(rounds):
        began = time.perf_counter()
        for conn in conns:
            conn.send(message)
        per_send.append((time.perf_counter() - began) / n)
        time.sleep(gap_s)
    os.waitpid(reader, 0)
    for conn in (*conns, listener):
        conn.close()
    return statistics.median(per_send)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1000, help="concurrent paced streams")
    p.add_argument("--tokens", type=int, default=50, help="reply length of the long run")
    p.add_argument("--ttft-ms", type=float, default=200)
    p.add_argument("--tbt-ms", type=float, default=20)
    p.add_argument("--runs", type=int, default=3, help="runs per reply length (the median counts)")
    p.add_argument("serve_flags", nargs="*", help="extra `llmsim serve` flags (after --), e.g. --workers 2")
    args = p.parse_args()
    servers.raise_nofile()
    short, _ = server_cpu(args.n, 1, args)
    long, command = server_cpu(args.n, args.tokens, args)
    # A stream of T tokens writes T content chunks, plus the role chunk and the end ([DONE]);
    # the 1-token stream writes 1 of them: the long run has T - 1 more events per stream.
    extra_events = args.n * (args.tokens - 1)
    per_request = statistics.median(short) / args.n
    per_event = (statistics.median(long) - statistics.median(short)) / extra_events
    floor = send_floor(args.n, 50, args.tbt_ms / 1000)
    per_core = 1 / per_event
    streams = per_core * args.tbt_ms / 1000
    print(f"{command}")
    print(f"N={args.n} paced chat streams, {args.ttft_ms:g} ms TTFT, {args.tbt_ms:g} ms gaps; "
          f"server CPU (s) per run, 1 token: {', '.join(f'{x:.2f}' for x in short)}; "
          f"{args.tokens} tokens: {', '.join(f'{x:.2f}' for x in long)}")
    print(f"{'server CPU per request':<34}{per_request * 1e6:8.0f} µs   (a 1-token stream: request, headers, end)")
    print(f"{'server CPU per paced event':<34}{per_event * 1e6:8.1f} µs   ({args.tokens} minus 1 token, "
          f"over {extra_events:,} events)")
    print(f"{'events/s one busy core sustains':<34}{per_core:8,.0f}      "
          f"(~{streams:,.0f} streams at {args.tbt_ms:g} ms gaps)")
    print(f"{'loopback send floor':<34}{floor * 1e6:8.1f} µs   (socket.send of {CHUNK} bytes on "
          f"{args.n} connections, reader in another process)")


if __name__ == "__main__":
    main()
