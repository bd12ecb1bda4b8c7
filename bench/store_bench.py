"""What storing costs: stored vs `store: false` Responses requests, closed loop, per phase
(store_false, stored, their streamed twins, chained, retrieve): requests, rps, p50 / p99
latency and errors, and the overhead of storing.

usage: python bench/store_bench.py [URL] [--seconds 5] [--concurrency 32] [-- llmsim flags]
  Without URL, starts `llmsim serve --profile instant` (plus the flags after `--`).
As a library: `run(base_url, seconds) -> dict` (base_url: the server root).
The phases: docs/benchmarks.md#benchstore_bench.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import httpx

now = time.perf_counter
MODEL = "gpt-4o"
CHAIN_LENGTH = 10


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _phase(client: httpx.AsyncClient, seconds: float, concurrency: int, step) -> dict:
    latencies: list[float] = []
    errors = 0
    deadline = now() + seconds

    async def worker(n: int) -> None:
        nonlocal errors
        state: dict = {}
        while now() < deadline:
            began = now()
            try:
                ok = await step(client, state, n)
            except httpx.HTTPError:
                ok = False
            if ok:
                latencies.append(now() - began)
            else:
                errors += 1
    started = now()
    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    elapsed = now() - started
    return {"requests": len(latencies), "rps": round(len(latencies) / elapsed, 1),
            "p50_ms": _ms(_percentile(latencies, 0.5)), "p99_ms": _ms(_percentile(latencies, 0.99)),
            "errors": errors}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def _create(store: bool, stream: bool = False):
    body = {"model": MODEL, "input": "Benchmark the store.", "stream": stream}
    if not store:
        body["store"] = False

    async def step(client, state, n) -> bool:
        if stream:
            async with client.stream("POST", "/v1/responses", json=body) as reply:
                async for _ in reply.aiter_raw():
                    pass
                return reply.status_code == 200
        return (await client.post("/v1/responses", json=body)).status_code == 200
    return step


async def _chained(client, state, n) -> bool:
    body = {"model": MODEL, "input": f"Turn {state.get('turns', 0)}."}
    if state.get("previous") and state.get("turns", 0) % CHAIN_LENGTH:
        body["previous_response_id"] = state["previous"]
    reply = await client.post("/v1/responses", json=body)
    if reply.status_code != 200:
        return False
    state["previous"] = reply.json()["id"]
    state["turns"] = state.get("turns", 0) + 1
    return True


def _retrieve(response_id: str):
    async def step(client, state, n) -> bool:
        return (await client.get(f"/v1/responses/{response_id}")).status_code == 200
    return step


async def run_async(base_url: str, seconds: float, concurrency: int = 32) -> dict:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as client:
        stored_id = (await client.post("/v1/responses", json={"model": MODEL, "input": "x"})).json()["id"]
        phases = {"store_false": _create(False), "stored": _create(True),
                  "stream_store_false": _create(False, True), "stream_stored": _create(True, True),
                  "chained": _chained, "retrieve": _retrieve(stored_id)}
        results = {}
        for name, step in phases.items():
            results[name] = await _phase(client, seconds, concurrency, step)
    results["overhead"] = {
        "json": _overhead(results["store_false"], results["stored"]),
        "stream": _overhead(results["stream_store_false"], results["stream_stored"])}
    results["config"] = {"seconds_per_phase": seconds, "concurrency": concurrency, "model": MODEL}
    return results


def _overhead(plain: dict, stored: dict) -> dict:
    lost = 1 - stored["rps"] / plain["rps"] if plain["rps"] else None
    added = (stored["p50_ms"] - plain["p50_ms"]) if plain["p50_ms"] is not None and stored["p50_ms"] is not None else None
    return {"throughput_lost_pct": None if lost is None else round(100 * lost, 1),
            "p50_added_ms": None if added is None else round(added, 2)}


def run(base_url: str, seconds: float, concurrency: int = 32) -> dict:
    """Measure a running server (its root URL); `seconds` per phase."""
    return asyncio.run(run_async(base_url.rstrip("/"), seconds, concurrency))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    flags = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url", nargs="?", help="server root, e.g. http://127.0.0.1:8080 (default: start one)")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds per phase (default 5)")
    p.add_argument("--concurrency", type=int, default=32, help="clients at once (default 32)")
    args = p.parse_args(argv)
    if args.url:
        results = run(args.url, args.seconds, args.concurrency)
    else:
        sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
        from servers import llmsim
        with llmsim("--profile", "instant", *flags) as server:
            results = run(server.url, args.seconds, args.concurrency)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
