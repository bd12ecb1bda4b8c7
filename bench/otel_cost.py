"""What does OpenTelemetry cost? W1 with OTel off and on, side by side, against a sink in this
process (issue 63: on keeps at least 85% of off's throughput). Exit status 1 when the median
req/s ratio is below 0.85; `--instructions` counts with callgrind instead.

    python bench/otel_cost.py [--seconds 5] [--rounds 6] [--connections 64] [--instructions]

The setup: docs/benchmarks.md#benchotel_cost.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from metrics_cost import BODIES, LUA, Server, wrk  # noqa: E402


class Sink:
    """An OTLP/HTTP endpoint that counts requests and bytes and keeps nothing."""

    def __init__(self):
        self.requests = self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"       # kept alive, as a collector's

            def do_POST(self):
                size = int(self.headers.get("content-length") or 0)
                self.rfile.read(size)
                sink.requests += 1
                sink.bytes += size
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def children_cpu(pid: int) -> float:
    """CPU seconds (user + system) of `pid`'s child processes: the OTel exporter process."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--instructions", action="store_true", help="count instructions (callgrind) instead")
    args = parser.parse_args()
    if args.instructions:
        return count_instructions()
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found (Debian package wrk)")
    path, body = BODIES["chat"]
    sink = Sink()
    ratios, cpu_ratios, exporter = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "post.lua")
        Path(script).write_text(LUA.format(body=body))
        servers = {"off": Server(), "on": Server("--otlp-endpoint", sink.url)}
        try:
            for server in servers.values():                                 # warm-up
                wrk(server.url + path, script, 2, args.connections)
            for n in range(args.rounds):
                rate, cpu = {}, {}
                for name in (("on", "off") if n % 2 == 0 else ("off", "on")):
                    server = servers[name]
                    before, child = server.cpu_seconds(), children_cpu(server.proc.pid)
                    rate[name], count = wrk(server.url + path, script, args.seconds, args.connections)
                    cpu[name] = (server.cpu_seconds() - before) / max(count, 1) * 1e6
                    if name == "on":
                        exporter.append((children_cpu(server.proc.pid) - child) / max(count, 1) * 1e6)
                ratios.append(rate["on"] / rate["off"])
                cpu_ratios.append(cpu["off"] / cpu["on"])
                print(f"round {n + 1}: off {rate['off']:8.1f} req/s {cpu['off']:5.1f} us CPU/req   "
                      f"on {rate['on']:8.1f} req/s {cpu['on']:5.1f} us CPU/req   "
                      f"on/off {ratios[-1]:.3f} (CPU {cpu_ratios[-1]:.3f}); exporter process "
                      f"{exporter[-1]:.1f} us CPU/req", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    median, cpu_median = statistics.median(ratios), statistics.median(cpu_ratios)
    print(f"\nmedian on/off: req/s {median:.3f}, CPU per request (off/on) {cpu_median:.3f}, exporter "
          f"process {statistics.median(exporter):.1f} us CPU per request; "
          f"the sink got {sink.requests} OTLP requests, {sink.bytes / 1e6:.1f} MB")
    return 0 if median >= 0.85 else 1


def count_instructions() -> int:
    import instructions
    if not instructions.available():
        raise SystemExit("needs valgrind and callgrind_control on PATH (apt-get install valgrind)")
    path, body = BODIES["chat"]
    sink = Sink()
    off = instructions.count(path, body.encode(), (), n=1100)
    on = instructions.count(path, body.encode(), ("--otlp-endpoint", sink.url), n=1100)
    print(f"instructions per request: off {off:,.0f}, on {on:,.0f} (+{on - off:,.0f}, "
          f"off/on {off / on:.3f}); the sink got {sink.requests} OTLP requests")
    return 0 if off / on >= 0.85 else 1


if __name__ == "__main__":
    sys.exit(main())
