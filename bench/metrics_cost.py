"""What do live metrics cost? W1-like throughput with `metrics: true` vs `--no-metrics`.

Starts two llmsim servers on loopback (`--profile instant --target-tokens 32`, one with
metrics off), warms both, then drives them in alternating rounds with
`wrk -t2 -c64 -dNs` on non-streaming chat completions, and prints requests/s per round,
the medians and the overhead of metrics on (target: < 5%). Alternating rounds on the same
machine keep the comparison fair on a shared 2-core box; only the ratio means anything.

    python bench/metrics_cost.py [--seconds 10] [--rounds 3] [--endpoint chat|responses]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BODIES = {
    "chat": ("/v1/chat/completions",
             '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say something."}]}'),
    "responses": ("/v1/responses", '{"model":"gpt-4o-mini","input":"Say something."}'),
}
LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
wrk.body = '{body}'
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "llmsim", "serve", "--port", str(self.port), "--profile",
               "instant", "--target-tokens", "32", "--log-level", "warning", *flags]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=1).read()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise SystemExit(f"llmsim {' '.join(flags)} exited at start-up")
                time.sleep(0.1)
        self.stop()
        raise SystemExit("llmsim did not start in 30 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def wrk(url: str, script: str, seconds: float, connections: int) -> float:
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds:g}s", "-s", script, url],
                         capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"wrk saw {errors.group(1)} error responses:\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--endpoint", choices=sorted(BODIES), default="chat")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found (Debian package wrk)")
    path, body = BODIES[args.endpoint]
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "post.lua")
        Path(script).write_text(LUA.format(body=body))
        servers = {"on": Server(), "off": Server("--no-metrics")}
        try:
            for server in servers.values():                                 # warm-up
                wrk(server.url + path, script, 2, args.connections)
            rates: dict[str, list[float]] = {"on": [], "off": []}
            for n in range(args.rounds):
                order = ("on", "off") if n % 2 == 0 else ("off", "on")
                for name in order:
                    rates[name].append(wrk(servers[name].url + path, script, args.seconds,
                                           args.connections))
                print(f"round {n + 1}: metrics on {rates['on'][-1]:9.1f} req/s   "
                      f"off {rates['off'][-1]:9.1f} req/s", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
    overhead = (off - on) / off * 100
    print(f"\n{args.endpoint}, non-streaming, 32 tokens, wrk -t2 -c{args.connections} "
          f"-d{args.seconds:g}s, {args.rounds} rounds (median)")
    print(f"{'metrics':<10}{'req/s':>12}")
    print(f"{'on':<10}{on:>12.1f}\n{'off':<10}{off:>12.1f}")
    print(f"overhead of metrics on: {overhead:.1f}% (target < 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
