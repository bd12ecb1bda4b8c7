"""What do live metrics cost? W1-like throughput with `metrics: true` vs `--no-metrics`, measured
three ways side by side (wrk, in-process ASGI, callgrind instructions; the verdict uses
instructions when valgrind is there). Exit status 1 when metrics cost 5% or more.

    python bench/metrics_cost.py [--seconds 5] [--rounds 6] [--endpoint chat|responses]
                                 [--mode all|wrk|asgi|instructions]

The three measurements: docs/benchmarks.md#benchmetrics_cost.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import instructions  # noqa: E402

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
SERVER_FLAGS = instructions.SERVER_FLAGS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "llmsim", "serve", "--port", str(self.port), "--log-level",
               "warning", *SERVER_FLAGS, *flags]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=1).read()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise SystemExit(f"llmsim {' '.join(flags)} exited at start-up") from None
                time.sleep(0.1)
        self.stop()
        raise SystemExit("llmsim did not start in 60 s")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def wrk(url: str, script: str, seconds: float, connections: int) -> tuple[float, int]:
    """(requests/s, requests completed)."""
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds:g}s", "-s", script, url],
                         capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"wrk saw {errors.group(1)} error responses:\n{out}")
    return (float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            int(re.search(r"(\d+) requests in", out).group(1)))


def run_wrk(args, path: str, body: str) -> dict[str, dict[str, float]]:
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found (Debian package wrk)")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "post.lua")
        Path(script).write_text(LUA.format(body=body))
        servers = {"on": Server(), "off": Server("--no-metrics")}
        best = {name: {"req/s": 0.0, "us/req": float("inf")} for name in servers}
        try:
            for server in servers.values():                                 # warm-up
                wrk(server.url + path, script, 2, args.connections)
            for n in range(args.rounds):
                line = {}
                for name in (("on", "off") if n % 2 == 0 else ("off", "on")):
                    server = servers[name]
                    cpu = server.cpu_seconds()
                    rate, count = wrk(server.url + path, script, args.seconds, args.connections)
                    us = (server.cpu_seconds() - cpu) / max(count, 1) * 1e6
                    best[name]["req/s"] = max(best[name]["req/s"], rate)
                    best[name]["us/req"] = min(best[name]["us/req"], us)
                    line[name] = f"{name:>3} {rate:8.1f} req/s {us:6.0f} us CPU/req"
                print(f"wrk round {n + 1}:  {line['on']}   {line['off']}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    return best


def asgi_caller(path: str, body: str):
    """(make_app(metrics_on), call(app)): one request straight into an app, no sockets."""
    sys.path.insert(0, str(REPO))
    import logging
    logging.disable(logging.WARNING)
    from llmsim.app import create_app
    from llmsim.settings import Settings
    payload = body.encode()
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80),
             "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(payload)).encode())]}
    flags = dict(zip(SERVER_FLAGS[::2], SERVER_FLAGS[1::2]))

    def make_app(metrics: bool):
        return create_app(Settings(profile=flags["--profile"], seed=1, metrics=metrics,
                                   target_tokens=int(flags["--target-tokens"])))

    async def call(app):
        delivered = False

        async def receive():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await asyncio.sleep(3600)

        async def send(message):
            if message["type"] == "http.response.start" and message["status"] != 200:
                raise SystemExit(f"the app answered {message['status']}")
        await app({**scope, "headers": list(scope["headers"]), "state": {}}, receive, send)
    return make_app, call


def run_asgi(args, path: str, body: str) -> dict[str, dict[str, float]]:
    """CPU per request of the app itself, called in-process (no sockets, no client)."""
    make_app, call = asgi_caller(path, body)

    async def measure():
        apps = {name: make_app(name == "on") for name in ("on", "off")}
        for app in apps.values():                                            # warm-up
            for _ in range(200):
                await call(app)
        best = {name: {"us/req": float("inf")} for name in apps}
        batch = 200
        for n in range(args.rounds * 5):
            for name in (("on", "off") if n % 2 == 0 else ("off", "on")):
                start = time.process_time()
                for _ in range(batch):
                    await call(apps[name])
                us = (time.process_time() - start) / batch * 1e6
                best[name]["us/req"] = min(best[name]["us/req"], us)
        return best
    return asyncio.run(measure())


def run_instructions(args, path: str, body: str) -> dict[str, dict[str, float]] | None:
    """Instructions per request of a real server (uvicorn and all), counted by valgrind's
    callgrind only while the measured requests are served: the same on any machine load."""
    if not instructions.available():
        print("\ninstructions: skipped (valgrind not installed)")
        return None
    return {side: {"Minstr/req": instructions.count(path, body.encode(), flags) / 1e6}
            for side, flags in (("on", ()), ("off", ("--no-metrics",)))}


def report(title: str, best: dict[str, dict[str, float]]) -> float:
    print(f"\n{title}")
    columns = list(best["on"])
    print(f"{'metrics':<10}" + "".join(f"{c:>12}" for c in columns))
    for name in ("on", "off"):
        print(f"{name:<10}" + "".join(f"{best[name][c]:>12.3f}" for c in columns))
    if "req/s" in best["on"]:
        lost = (best["off"]["req/s"] - best["on"]["req/s"]) / best["off"]["req/s"] * 100
        print(f"requests/s lost with metrics on: {lost:.1f}%")
    cost = "us/req" if "us/req" in best["on"] else "Minstr/req"
    overhead = (best["on"][cost] - best["off"][cost]) / best["off"][cost] * 100
    print(f"overhead of metrics on ({cost}): {overhead:.1f}% (target < 5%)")
    return overhead


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--endpoint", choices=sorted(BODIES), default="chat")
    ap.add_argument("--mode", choices=("all", "wrk", "asgi", "instructions"), default="all")
    args = ap.parse_args()
    path, body = BODIES[args.endpoint]
    overheads = {}
    if args.mode in ("all", "wrk"):
        overheads["wrk"] = (report(f"wrk: {args.endpoint}, non-streaming, 32 tokens, wrk -t2 "
                                f"-c{args.connections} -d{args.seconds:g}s, best of {args.rounds} rounds",
                                run_wrk(args, path, body)))
    if args.mode in ("all", "asgi"):
        overheads["asgi"] = (report(f"asgi: {args.endpoint}, in-process, best of {args.rounds * 5} "
                                "batches of 200", run_asgi(args, path, body)))
    if args.mode in ("all", "instructions"):
        counted = run_instructions(args, path, body)
        if counted:
            overheads["instructions"] = report(f"instructions: {args.endpoint}, llmsim serve under "
                                               "callgrind, 200 requests after warm-up", counted)
    judged = next((k for k in ("instructions", "asgi", "wrk") if k in overheads), None)
    if judged is None:
        return 0
    print(f"\nverdict ({judged}): metrics on cost {overheads[judged]:.1f}% "
          f"({'within' if overheads[judged] < 5 else 'over'} the 5% target)")
    return 0 if overheads[judged] < 5 else 1


if __name__ == "__main__":
    sys.exit(main())
