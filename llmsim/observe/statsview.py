"""Read side of the stats: gather worker snapshots, merge them, and derive what people read.

`gather(stats)` is this process's live snapshot plus, under `--workers N`, the snapshot files
of the other workers (at most `stats.SHARE_INTERVAL` old; a dead worker's counters still
count, its gauges do not). `merge` adds everything up; `view` turns the merged data into the
values the `stats` template lays out (percentiles, rates over 1/10/60 s, a 60 s timeline).
"""
from __future__ import annotations

import os
import time
from typing import Iterable

import orjson

from llmsim.observe.stats import BOUNDS, OTHER_MODEL, Stats

WINDOWS = (1, 10, 60)
TIMELINE = 60
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
GAUGES = ("active", "active_streams", "ws_active")
COUNTERS = ("requests", "streaming", "ws_connections", "ws_turns") + GAUGES
TABLES = ("status", "errors", "injected", "webhooks")
WEBHOOK_OUTCOMES = ("queued", "sent", "failed", "delivered", "dropped")
MODEL_COUNTERS = ("requests", "prompt", "completion", "reasoning", "running")
MODEL_HISTOGRAMS = ("ttft", "itl", "e2e")
HOST_GAUGES = ("running", "waiting", "host")     # the serving model's, under --workers (llmsim.state.hostslots)


def gather(stats: Stats) -> dict:
    snapshots = [stats.snapshot()]
    if stats.share_dir is not None and stats.share_dir.is_dir():
        own = stats.share_path().name
        for path in stats.share_dir.glob("*.json"):
            if path.name == own or not path.stem.isdigit():     # (others' files: config.json, ratelimits.json)
                continue
            try:
                snap = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                continue
            if not alive(snap["pid"]):
                snap.update({g: 0 for g in GAUGES})
                for m in snap["models"].values():
                    m["running"] = 0
                for m in snap.get("serving", {}).values():
                    m["running"] = m["waiting"] = 0
            snapshots.append(snap)
    return merge(snapshots)


def alive(pid: int) -> bool:
    """Whether process `pid` exists (its snapshot, or its slots, are still its own)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _hist() -> dict:
    return {"counts": [0] * (len(BOUNDS) + 1), "sums": [0.0] * (len(BOUNDS) + 1), "sum": 0.0,
            "max": 0.0}


def _add_hist(into: dict, snap: dict) -> None:
    counts, sums = into["counts"], into["sums"]
    for i, c, total in snap["counts"]:
        counts[i] += c
        sums[i] += total
    into["sum"] += snap["sum"]
    into["max"] = max(into["max"], snap["max"])


def _add_table(into: dict, table: dict) -> None:
    for key, value in table.items():
        into[key] = into.get(key, 0) + value


def merge(snapshots: Iterable[dict]) -> dict:
    """Sum of the snapshots; histograms dense; `workers` counts the snapshots."""
    out = {name: 0 for name in COUNTERS}
    out.update({name: {} for name in TABLES}, endpoints={}, models={}, ring={},
               http=_hist(), lateness=_hist(), started=None, enabled=False, workers=0, serving={})
    for snap in snapshots:
        out["workers"] += 1
        out["enabled"] = out["enabled"] or snap["enabled"]
        out["started"] = snap["started"] if out["started"] is None else min(out["started"], snap["started"])
        for name in COUNTERS:
            out[name] += snap[name]
        for name in TABLES:
            _add_table(out[name], snap[name])
        for name, counts in snap["endpoints"].items():
            into = out["endpoints"].setdefault(name, [0, 0, 0])
            for i, c in enumerate(counts):
                into[i] += c
        for name, m in snap["models"].items():
            into = out["models"].setdefault(name, {**{c: 0 for c in MODEL_COUNTERS},
                                                   **{h: _hist() for h in MODEL_HISTOGRAMS}})
            for c in MODEL_COUNTERS:
                into[c] += m[c]
            for h in MODEL_HISTOGRAMS:
                _add_hist(into[h], m[h])
        for name, m in snap.get("serving", {}).items():    # the serving model (llmsim.state.serving)
            into = out["serving"].setdefault(name, {})
            for key, value in m.items():        # a shared cache's use is the same in every process
                if key in HOST_GAUGES and m.get("host"):    # the host's slots, read by each worker:
                    into.setdefault(key, value)             # the first (this process's, fresh) read
                else:
                    into[key] = max(into.get(key, 0), value) if key == "kv_usage" else into.get(key, 0) + value
        _add_hist(out["http"], snap["http"])
        _add_hist(out["lateness"], snap["lateness"])
        for second, counts in snap["ring"].items():
            into = out["ring"].setdefault(int(second), [0, 0, 0])
            for i, c in enumerate(counts):
                into[i] += c
    if out["started"] is None:
        out["started"] = time.time()
    return out


def combined(models: dict, name: str) -> dict:
    """One dense histogram over every model (e.g. all TTFTs)."""
    total = _hist()
    for m in models.values():
        hist = m[name]
        total["counts"] = [a + b for a, b in zip(total["counts"], hist["counts"])]
        total["sums"] = [a + b for a, b in zip(total["sums"], hist["sums"])]
        _add_hist(total, {**hist, "counts": ()})
    return total


def quantile(hist: dict, q: float) -> float | None:
    """Estimated q-quantile in seconds. Within its bucket, values are taken as spread evenly
    around the bucket's mean, as widely as the bucket (and the largest value seen) allow: a
    bucket holding one repeated value gives that value exactly."""
    counts = hist["counts"]
    n = sum(counts)
    if not n:
        return None
    rank, cum = q * n, 0
    for i, c in enumerate(counts):
        if c and cum + c >= rank:
            lo = min(BOUNDS[i - 1] if i else 0.0, hist["max"])
            hi = min(BOUNDS[i] if i < len(BOUNDS) else hist["max"], hist["max"])
            mean = min(max(hist["sums"][i] / c, lo), hi)
            half = min(mean - lo, hi - mean)
            return mean + half * (2 * (rank - cum) / c - 1)
        cum += c
    return hist["max"]


def percentiles_ms(hist: dict) -> dict:
    """p50, p90 and p99 in ms (None before the first value), the largest and the mean, and
    the count of values."""
    n = sum(hist["counts"])
    out = {name: _ms(quantile(hist, q)) for name, q in QUANTILES}
    out.update(max=_ms(hist["max"]) if n else None, mean=_ms(hist["sum"] / n) if n else None, count=n)
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def rates(merged: dict, now: float) -> list[dict]:
    """Per window (the last 1/10/60 full seconds): requests, output tokens and errors per second."""
    current = int(now)
    uptime = max(now - merged["started"], 1.0)
    ring = merged["ring"]
    out = []
    for w in WINDOWS:
        counts = [sum(ring.get(current - k, (0, 0, 0))[i] for k in range(1, w + 1)) for i in range(3)]
        requests, tokens, errors = (round(n / min(w, uptime), 3) for n in counts)
        out.append({"seconds": w, "requests": requests, "tokens": tokens, "errors": errors})
    return out


def timeline(merged: dict, now: float) -> dict:
    """The last `TIMELINE` full seconds, oldest first."""
    current = int(now)
    seconds = range(current - TIMELINE, current)
    ring = merged["ring"]
    return {name: [ring.get(s, (0, 0, 0))[i] for s in seconds]
            for i, name in enumerate(("requests", "tokens", "errors"))}


def _rows(table: dict) -> list[dict]:
    return [{"name": name, "count": count} for name, count in table.items()]


def view(merged: dict, now: float | None = None) -> dict:
    """The values of /llmsim/stats, which templates/stats.yaml lays out and names: counts,
    percentiles, and rows (per endpoint, model, status class, error code and rate window)
    as lists of records, busiest model first."""
    now = time.time() if now is None else now
    models = merged["models"]
    endpoints = dict(merged["endpoints"])
    for name in ("responses", "chat"):          # always listed
        endpoints.setdefault(name, [0, 0, 0])
    ordered = sorted(models.items(), key=lambda kv: (kv[0] == OTHER_MODEL, -kv[1]["requests"], kv[0]))
    return {
        **{name: merged[name] for name in ("enabled", "workers", "webhooks", *COUNTERS)},
        **{name: _rows(merged[name]) for name in ("status", "errors", "injected")},
        "uptime_s": round(now - merged["started"], 3),
        "running": sum(m["running"] for m in models.values()),
        "error_total": sum(merged["errors"].values()) + sum(merged["injected"].values()),
        "endpoints": [{"name": name, "requests": c[0], "streaming": c[1], "errors": c[2]}
                      for name, c in endpoints.items()],
        **{name: sum(m[name] for m in models.values()) for name in ("prompt", "completion", "reasoning")},
        "rates": rates(merged, now),
        **{name: percentiles_ms(combined(models, name)) for name in MODEL_HISTOGRAMS},
        "http": percentiles_ms(merged["http"]),
        "lateness": percentiles_ms(merged["lateness"]),
        "models": [{"name": name, **{c: m[c] for c in MODEL_COUNTERS}} for name, m in ordered],
        "timeline": timeline(merged, now),
    }
