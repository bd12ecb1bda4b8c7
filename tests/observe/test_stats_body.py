"""The /llmsim/stats body, byte for byte, as templates/stats.yaml lays it out: every key, its
order and its value, for the counters of two workers merged and for a server that counted
nothing. What a user reads (and `llmsim top` draws) must not change when the code behind it
does."""
from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest

from llmsim.observe import statsview
from llmsim.render.templates import TemplateSet
from llmsim.settings import Settings

REPO = Path(__file__).resolve().parents[2]
NOW = 1_700_000_100.5       # the time of the read (the ring's seconds are relative to it)


def hist(*buckets, biggest=0.0) -> dict:
    """A histogram snapshot: (bucket index, count, sum of the values in seconds) per bucket."""
    return {"counts": [list(b) for b in buckets], "sum": sum(b[2] for b in buckets), "max": biggest}


def model(requests, prompt, completion, reasoning, running, ttft, itl, e2e) -> dict:
    return {"requests": requests, "prompt": prompt, "completion": completion, "reasoning": reasoning,
            "running": running, "ttft": ttft, "itl": itl, "e2e": e2e}


def worker(**fields) -> dict:
    """One worker's snapshot (what `Stats.snapshot` shares), counting nothing but `fields`."""
    snap = {"pid": 1, "started": NOW - 3.0, "enabled": True, "requests": 0, "streaming": 0, "active": 0,
            "active_streams": 0, "ws_connections": 0, "ws_active": 0, "ws_turns": 0, "status": {},
            "endpoints": {}, "errors": {}, "injected": {}, "webhooks": {}, "models": {}, "http": hist(),
            "lateness": hist(), "ring": {}, "serving": {}}
    snap.update(fields)
    return snap


FIRST = worker(
    pid=1, started=NOW - 100.25, requests=7, streaming=3, active=1, active_streams=1, ws_connections=2,
    ws_active=1, ws_turns=4, status={"none": 1, "2xx": 5, "4xx": 1},
    endpoints={"responses": [4, 2, 1], "embeddings": [1, 0, 0], "websocket": [2, 1, 0]},
    errors={"model_not_found": 1}, injected={"rate_limit": 2}, webhooks={"queued": 2, "sent": 3, "failed": 1},
    models={"gpt-4o": model(3, 30, 20, 0, 1, hist((100, 3, 0.3), biggest=0.11), hist((40, 10, 0.2), biggest=0.03),
                            hist((130, 3, 1.5), biggest=0.6)),
            "o3": model(1, 5, 7, 11, 0, hist((120, 1, 0.5), biggest=0.5), hist(), hist((140, 1, 2.0), biggest=2.0)),
            "other": model(2, 4, 4, 0, 0, hist((0, 2, 0.0)), hist(), hist((0, 2, 0.0)))},
    http=hist((90, 6, 0.06), (150, 1, 3.0), biggest=3.0), lateness=hist((20, 40, 0.004), biggest=0.0002),
    ring={str(int(NOW) - 1): [2, 10, 1], str(int(NOW) - 5): [3, 20, 0], str(int(NOW) - 70): [9, 9, 9]})
SECOND = worker(
    pid=2, started=NOW - 50.0, requests=2, status={"2xx": 2}, endpoints={"chat": [2, 0, 0]},
    models={"gpt-4.1": model(3, 12, 9, 0, 0, hist((100, 3, 0.3), biggest=0.11), hist(),
                             hist((110, 3, 0.4), biggest=0.2))},
    http=hist((80, 2, 0.01), biggest=0.006), ring={str(int(NOW) - 2): [2, 18, 0]})


def timeline(**seconds_ago: int) -> list[int]:
    """The last 60 full seconds, oldest first: `s1=3` is 3 one second ago."""
    out = [0] * 60
    for name, count in seconds_ago.items():
        out[60 - int(name[1:])] = count
    return out


def row(requests, prompt, completion, reasoning, running) -> dict:
    return {"requests": requests, "prompt_tokens": prompt, "completion_tokens": completion,
            "reasoning_tokens": reasoning, "running": running}


TWO_WORKERS = {
    "object": "llmsim.stats",
    "enabled": True,
    "uptime_s": 100.25,
    "workers": 2,
    "requests": {"total": 9, "active": 1, "streaming": 3, "non_streaming": 6, "active_streams": 1, "running": 1,
                 "by_status": {"none": 1, "2xx": 7, "4xx": 1}},
    "endpoints": {"responses": {"requests": 4, "streaming": 2, "errors": 1},
                  "embeddings": {"requests": 1, "streaming": 0, "errors": 0},
                  "websocket": {"requests": 2, "streaming": 1, "errors": 0},
                  "chat": {"requests": 2, "streaming": 0, "errors": 0}},
    "websocket": {"connections": 2, "active": 1, "turns": 4},
    "tokens": {"prompt": 51, "completion": 40, "reasoning": 11, "total": 102},
    "errors": {"total": 3, "real": {"model_not_found": 1}, "injected": {"rate_limit": 2}},
    "rates": {"requests_per_s": {"1s": 2.0, "10s": 0.7, "60s": 0.117},
              "tokens_per_s": {"1s": 10.0, "10s": 4.8, "60s": 0.8},
              "errors_per_s": {"1s": 1.0, "10s": 0.1, "60s": 0.017}},
    "latency_ms": {"ttft": {"p50": 180.0, "p90": 500.0, "p99": 500.0},
                   "total": {"p50": 550.0, "p90": 2000.0, "p99": 2000.0},
                   "inter_token": {"p50": 0.55, "p90": 0.55, "p99": 0.55},
                   "http": {"p50": 75.0, "p90": 3000.0, "p99": 3000.0}},
    "lateness_ms": {"p50": 0.075, "p90": 0.075, "p99": 0.075, "max": 0.2, "count": 40},
    "webhooks": {"queued": 2, "sent": 3, "failed": 1, "delivered": 0, "dropped": 0},
    "models": {"gpt-4.1": row(3, 12, 9, 0, 0), "gpt-4o": row(3, 30, 20, 0, 1), "o3": row(1, 5, 7, 11, 0),
               "other": row(2, 4, 4, 0, 0)},      # busiest first, "other" (past the model slots) last
    "timeline": {"requests": timeline(s1=2, s2=2, s5=3), "tokens": timeline(s1=10, s2=18, s5=20),
                 "errors": timeline(s1=1)},
}

NOTHING_COUNTED = {
    "object": "llmsim.stats",
    "enabled": True,
    "uptime_s": 3.0,
    "workers": 1,
    "requests": {"total": 0, "active": 0, "streaming": 0, "non_streaming": 0, "active_streams": 0, "running": 0,
                 "by_status": {}},
    "endpoints": {"responses": {"requests": 0, "streaming": 0, "errors": 0},
                  "chat": {"requests": 0, "streaming": 0, "errors": 0}},
    "websocket": {"connections": 0, "active": 0, "turns": 0},
    "tokens": {"prompt": 0, "completion": 0, "reasoning": 0, "total": 0},
    "errors": {"total": 0, "real": {}, "injected": {}},
    "rates": {name: {"1s": 0.0, "10s": 0.0, "60s": 0.0} for name in ("requests_per_s", "tokens_per_s", "errors_per_s")},
    "latency_ms": {name: {"p50": None, "p90": None, "p99": None} for name in ("ttft", "total", "inter_token", "http")},
    "lateness_ms": {"p50": None, "p90": None, "p99": None, "max": None, "count": 0},
    "webhooks": {"queued": 0, "sent": 0, "failed": 0, "delivered": 0, "dropped": 0},
    "models": {},
    "timeline": {"requests": timeline(), "tokens": timeline(), "errors": timeline()},
}


@pytest.fixture(scope="module")
def template():
    return TemplateSet(REPO / "templates", {"settings": Settings()})["stats"]


def view(*snapshots):
    """What the handler gives the template, for these workers' snapshots read at `NOW`."""
    return statsview.view(statsview.merge(copy.deepcopy(list(snapshots))), now=NOW)


@pytest.mark.parametrize("snapshots, expected", [((FIRST, SECOND), TWO_WORKERS), ((worker(),), NOTHING_COUNTED)],
                         ids=["two workers", "nothing counted"])
def test_the_stats_body_is_laid_out_field_by_field(template, snapshots, expected):
    assert template.body_json(view=view(*snapshots)) == orjson.dumps(expected)


@pytest.mark.parametrize("snapshots", [(FIRST, SECOND), (worker(),)], ids=["two workers", "nothing counted"])
def test_the_reference_renderer_gives_the_same_body(template, snapshots):
    assert orjson.dumps(template.body(view=view(*snapshots))) == template.body_json(view=view(*snapshots))
