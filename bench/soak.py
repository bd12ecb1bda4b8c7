"""Soak test: mixed traffic against one `llmsim serve` for M minutes, watching for growth.

    python bench/soak.py --minutes 5                  # tuned server, SQLite store in a temp dir
    python bench/soak.py --minutes 1 --server plain   # what CI runs (.ci/run), per server

Every `--interval` seconds it prints RSS, open descriptors, threads, requests and streams in
flight and the store's size. Exit status 0 when, after warm-up, RSS grew by at most
`--tolerance` percent, descriptors by at most a few, and no answer was an uninjected 5xx.
The traffic mix and why RSS still steps up after warm-up: docs/benchmarks.md#benchsoak.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

from llmsim.testing import Server

MODEL = "gpt-4o-mini"
FD_SLACK = 8        # open descriptors may differ by this many (connections being set up)


def proc_figures(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"rss_mb": int(fields["VmRSS"].split()[0]) / 1024, "threads": int(fields["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


class Soak:
    def __init__(self, server: Server, store: Path | None, clients: int):
        self.server, self.store, self.clients = server, store, clients
        self.counts = {"requests": 0, "injected": 0, "5xx": 0, "left": 0, "errors": 0}
        self.rng = random.Random(7)

    async def run(self, seconds: float, interval: float) -> list[dict]:
        stop = time.monotonic() + seconds
        async with httpx.AsyncClient(base_url=self.server.openai_url, timeout=30,
                                     limits=httpx.Limits(max_connections=self.clients * 2)) as http:
            self.http = http
            workers = [asyncio.create_task(self.client(stop)) for _ in range(self.clients)]
            samples = []
            started = time.monotonic()
            while time.monotonic() < stop:
                await asyncio.sleep(min(interval, max(0.0, stop - time.monotonic())))
                samples.append(await self.sample(time.monotonic() - started))
            await asyncio.gather(*workers)
        return samples

    async def sample(self, elapsed: float) -> dict:
        figures = {"t_s": round(elapsed), **proc_figures(self.server.proc.pid)}
        stats = (await self.http.get(self.server.url + "/llmsim/stats")).json()
        requests = stats.get("requests") or {}
        figures["active"] = requests.get("active")
        figures["streams"] = requests.get("active_streams")
        if self.store is not None:
            figures["store_kb"] = sum(p.stat().st_size for p in self.store.parent.glob(self.store.name + "*")) // 1024
        figures.update(self.counts)
        print(json.dumps(figures), flush=True)
        return figures

    async def client(self, stop: float) -> None:
        kinds = [self.json, self.sse, self.chat, self.websocket, self.stored, self.chained,
                 self.fault, self.leave]
        while time.monotonic() < stop:
            try:
                await self.rng.choice(kinds)()
            except (TimeoutError, httpx.HTTPError, OSError) as exc:
                self.counts["errors"] += 1
                print(f"client error: {exc!r}", file=sys.stderr)

    def answered(self, response: httpx.Response, injected: bool = False) -> httpx.Response:
        self.counts["requests"] += 1
        if response.status_code >= 500 and not injected:
            self.counts["5xx"] += 1
            print(f"unexpected {response.status_code}: {response.text[:200]}", file=sys.stderr)
        return response

    async def json(self):
        self.answered(await self.http.post("/responses", json={"model": MODEL, "input": "hi", "store": False}))

    async def sse(self):
        async with self.http.stream("POST", "/responses", json={"model": MODEL, "input": "hi",
                                                                  "stream": True}) as response:
            async for _ in response.aiter_bytes():
                pass
        self.answered(response)

    async def chat(self):
        self.answered(await self.http.post("/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}]}))

    async def websocket(self):
        url = self.server.url.replace("http://", "ws://") + "/v1/responses"
        async with connect(url) as ws:
            for _ in range(2):
                await ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi"}))
                while json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] not in (
                        "response.completed", "response.failed", "response.incomplete", "error"):
                    pass
        self.counts["requests"] += 1

    async def stored(self):
        created = self.answered(await self.http.post("/responses", json={"model": MODEL, "input": "keep"}))
        if created.status_code == 200:
            self.answered(await self.http.get(f"/responses/{created.json()['id']}"))

    async def chained(self):
        first = self.answered(await self.http.post("/responses", json={"model": MODEL, "input": "one"}))
        if first.status_code == 200:
            self.answered(await self.http.post("/responses", json={
                "model": MODEL, "input": "two", "previous_response_id": first.json()["id"]}))

    async def fault(self):
        kind = self.rng.choice(["rate_limit", "server_error", "overloaded", "stream_error"])
        self.counts["injected"] += 1
        self.answered(await self.http.post("/responses", headers={"x-llmsim-fault": kind},
                                           json={"model": MODEL, "input": "hi", "stream": kind == "stream_error"}),
                      injected=True)

    async def leave(self):
        async with self.http.stream("POST", "/responses", json={"model": MODEL, "input": "hi",
                                                                  "stream": True}) as response:
            async for _ in response.aiter_bytes():
                break                       # the client leaves after its first bytes
        self.counts["left"] += 1


def warmed(samples: list[dict], warmup: float) -> dict:
    """The first sample taken after warm-up: `warmup` seconds, or half the run if shorter."""
    after = min(warmup, samples[-1]["t_s"] / 2)
    return next(s for s in samples if s["t_s"] >= after)


def verdict(samples: list[dict], tolerance: float, warmup: float) -> list[str]:
    """What went wrong (nothing: an empty list)."""
    problems = []
    first, last = warmed(samples, warmup), samples[-1]
    growth = (last["rss_mb"] - first["rss_mb"]) / first["rss_mb"] * 100
    if growth > tolerance:
        problems.append(f"RSS grew {growth:.1f}% after warm-up ({first['rss_mb']:.1f} MB at "
                        f"{first['t_s']} s -> {last['rss_mb']:.1f} MB)")
    if last["fds"] > first["fds"] + FD_SLACK:
        problems.append(f"open descriptors grew from {first['fds']} to {last['fds']}")
    if last["5xx"]:
        problems.append(f"{last['5xx']} answers were 5xx without an injected fault")
    if last["errors"]:
        problems.append(f"{last['errors']} requests failed at the client")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=5)
    p.add_argument("--interval", type=float, help="seconds between samples (default 60, or a quarter of a shorter run)")
    p.add_argument("--server", default="tuned", choices=["tuned", "plain"])
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    p.add_argument("--tolerance", type=float, default=5.0, help="RSS growth allowed after warm-up, percent (default 5)")
    p.add_argument("--warmup", type=float, default=120.0,
                   help="seconds of warm-up before the RSS baseline (default 120; at most half the run)")
    args = p.parse_args(argv)
    seconds = args.minutes * 60
    interval = args.interval or min(60.0, seconds / 4)
    with tempfile.TemporaryDirectory(prefix="llmsim-soak-") as scratch:
        store = Path(scratch) / "soak.sqlite3"
        server = Server(["--server", args.server, "--ttft-ms", "5", "--tbt-ms", "2", "--target-tokens", "40",
                         "--store", str(store), "--store-max-entries", "300", "--store-ttl-s", "120"])
        try:
            print(f"soak: {args.minutes:g} min against {server.url} (--server {args.server}), "
                  f"{args.clients} clients, a sample every {interval:g} s", flush=True)
            samples = asyncio.run(Soak(server, store, args.clients).run(seconds, interval))
        finally:
            server.stop()
    problems = verdict(samples, args.tolerance, args.warmup)
    first, last = warmed(samples, args.warmup), samples[-1]
    print(f"soak: {last['requests']} requests ({last['injected']} with injected faults, {last['left']} "
          f"clients left mid-stream); after warm-up ({first['t_s']} s) RSS {first['rss_mb']:.1f} -> "
          f"{last['rss_mb']:.1f} MB, fds {first['fds']} -> {last['fds']}")
    print("soak verdict: " + ("no growth, no unexpected 5xx" if not problems else "; ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
