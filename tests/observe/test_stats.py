"""GET /llmsim/stats against fresh live servers: traffic through the official SDK, exact counts.

Each server here is private to this module, so the difference between two reads of the
stats is exactly the traffic a test sent.
"""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

PACED = ("--ttft-ms", "1000", "--tbt-ms", "20", "--target-tokens", "10")


def read(server) -> dict:
    response = httpx.get(f"{server.url}/llmsim/stats", timeout=5)
    assert response.status_code == 200
    return response.json()


def wait_for(server, check, timeout: float = 10.0) -> dict:
    """Stats once `check(stats)` holds (counters settle when a request has fully ended)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = read(server)
        if check(stats) or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


@pytest.fixture(scope="module")
def fresh(live_server_factory):
    return live_server_factory("--profile", "instant")


@pytest.fixture(scope="module")
def paced(live_server_factory):
    return live_server_factory(*PACED)


def test_requests_are_counted_by_kind_and_endpoint(fresh):
    client = fresh.client()
    before = read(fresh)
    client.responses.create(model="gpt-4o-mini", input="one")
    client.responses.create(model="gpt-4o-mini", input="two")
    for _ in client.responses.create(model="gpt-4o-mini", input="three", stream=True):
        pass
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="four")
    after = wait_for(fresh, lambda s: s["requests"]["total"] == before["requests"]["total"] + 4)
    req, old = after["requests"], before["requests"]
    assert req["total"] - old["total"] == 4
    assert req["streaming"] - old["streaming"] == 1
    assert req["non_streaming"] - old["non_streaming"] == 3
    assert req["active"] == 0 and req["active_streams"] == 0
    assert req["by_status"]["2xx"] - old["by_status"].get("2xx", 0) == 3
    assert req["by_status"]["4xx"] - old["by_status"].get("4xx", 0) == 1
    responses = after["endpoints"]["responses"]
    assert responses["requests"] - before["endpoints"]["responses"]["requests"] == 4
    assert responses["streaming"] - before["endpoints"]["responses"]["streaming"] == 1
    assert after["errors"]["real"]["model_not_found"] - before["errors"]["real"].get("model_not_found", 0) == 1


def test_token_totals_match_the_usage_clients_saw(fresh):
    client = fresh.client()
    before = read(fresh)
    answers = [client.responses.create(model="o3", input="Think about it.", reasoning={"effort": "low"}),
               client.responses.create(model="gpt-4o-mini", input="Say something.")]
    after = wait_for(fresh, lambda s: s["requests"]["total"] == before["requests"]["total"] + 2)
    prompt = sum(a.usage.input_tokens for a in answers)
    reasoning = sum(a.usage.output_tokens_details.reasoning_tokens for a in answers)
    total = sum(a.usage.total_tokens for a in answers)
    delta = {k: after["tokens"][k] - before["tokens"][k] for k in after["tokens"]}
    assert reasoning > 0
    assert delta == {"prompt": prompt, "reasoning": reasoning, "completion": total - prompt - reasoning,
                     "total": total}


def test_requests_are_counted_per_model(fresh):
    client = fresh.client()
    before = read(fresh)["models"]
    for model in ("gpt-4.1", "gpt-4.1", "gpt-4o"):
        client.responses.create(model=model, input="hi")
    after = read(fresh)["models"]
    assert after["gpt-4.1"]["requests"] - before.get("gpt-4.1", {}).get("requests", 0) == 2
    assert after["gpt-4o"]["requests"] - before.get("gpt-4o", {}).get("requests", 0) == 1


def test_stats_metrics_and_health_are_not_counted(fresh):
    before = read(fresh)
    for path in ("/llmsim/stats", "/metrics", "/llmsim/metrics", "/health"):
        assert httpx.get(fresh.url + path).status_code == 200
    assert read(fresh)["requests"]["total"] == before["requests"]["total"]


def test_injected_faults_are_counted_apart_from_real_errors(fresh):
    client = fresh.client()
    before = read(fresh)["errors"]
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="gpt-4o-mini", input="hi",
                                extra_headers={"x-llmsim-fault": "rate_limit"})
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="gpt-4o-mini", input="hi", temperature=9)
    after = read(fresh)["errors"]
    assert after["injected"]["rate_limit"] - before["injected"].get("rate_limit", 0) == 1
    assert sum(after["real"].values()) - sum(before["real"].values()) == 1
    assert "rate_limit" not in after["real"] and "rate_limit_exceeded" not in after["real"]
    assert after["total"] - before["total"] == 2


def test_mid_stream_fault_counts_once_as_injected(fresh):
    client = fresh.client()
    before = read(fresh)
    stream = client.responses.create(model="gpt-4o-mini", input="hi", stream=True,
                                     extra_headers={"x-llmsim-fault": "stream_failed;after_tokens=2"})
    types = [event.type for event in stream]
    assert types[-1] == "response.failed"
    after = wait_for(fresh, lambda s: s["requests"]["total"] == before["requests"]["total"] + 1)
    assert after["errors"]["injected"]["stream_failed"] - before["errors"]["injected"].get("stream_failed", 0) == 1
    assert after["errors"]["total"] - before["errors"]["total"] == 1
    assert after["endpoints"]["responses"]["errors"] - before["endpoints"]["responses"]["errors"] == 1


def next_second() -> None:
    """Sleep into the next wall second: the timeline holds whole seconds only."""
    time.sleep(1.05 - time.time() % 1)


def test_timeline_and_rates_cover_recent_requests(fresh):
    client = fresh.client()
    next_second()
    before = read(fresh)
    for _ in range(5):
        client.responses.create(model="gpt-4o-mini", input="hi")
    next_second()
    after = read(fresh)
    new = after["requests"]["total"] - before["requests"]["total"]
    assert new == 5
    assert sum(after["timeline"]["requests"]) - sum(before["timeline"]["requests"]) == 5
    assert len(after["timeline"]["requests"]) == 60
    assert after["rates"]["requests_per_s"]["60s"] > 0
    assert after["rates"]["tokens_per_s"]["60s"] > 0


def test_open_stream_is_active_until_it_ends(paced):
    with httpx.stream("POST", f"{paced.base}/responses", timeout=10,
                      json={"model": "gpt-4o-mini", "input": "hi", "stream": True}) as response:
        assert response.status_code == 200
        during = read(paced)                    # the first token is 1 s away
        body = response.read()
    assert b"response.completed" in body
    assert during["requests"]["active"] == 1
    assert during["requests"]["active_streams"] == 1
    assert during["requests"]["running"] == 1
    assert during["models"]["gpt-4o-mini"]["running"] == 1
    after = wait_for(paced, lambda s: s["requests"]["active"] == 0)
    assert (after["requests"]["active_streams"], after["requests"]["running"]) == (0, 0)


def test_a_non_streamed_answer_counts_its_tokens_as_it_ends(paced):
    """While a non-streamed answer waits it is running; its output tokens join the totals and
    the timeline together, when it ends."""
    import threading

    wait_for(paced, lambda s: s["requests"]["active"] == 0)
    next_second()                           # the timeline holds whole seconds only
    before = read(paced)
    answers = []
    worker = threading.Thread(target=lambda: answers.append(
        paced.client().responses.create(model="gpt-4o-mini", input="hi")))
    worker.start()
    during = wait_for(paced, lambda s: s["requests"]["running"] == before["requests"]["running"] + 1)
    worker.join(timeout=10)
    next_second()
    after = read(paced)
    assert during["requests"]["active"] - before["requests"]["active"] == 1
    assert during["models"]["gpt-4o-mini"]["running"] - before["models"].get("gpt-4o-mini", {}).get("running", 0) == 1
    assert during["tokens"]["completion"] == before["tokens"]["completion"]
    output = answers[0].usage.output_tokens
    assert after["tokens"]["completion"] + after["tokens"]["reasoning"] - \
        before["tokens"]["completion"] - before["tokens"]["reasoning"] == output
    assert sum(after["timeline"]["tokens"]) - sum(before["timeline"]["tokens"]) == output
    assert after["requests"]["running"] == before["requests"]["running"]


def test_a_client_that_leaves_a_waiting_stream_ends_it_at_once(live_server_factory):
    """The stream's first token is a minute away: the server notices the client left and
    lets the stream go then, not when its next write would fail."""
    server = live_server_factory("--ttft-ms", "60000")
    with httpx.stream("POST", f"{server.base}/chat/completions", timeout=10,
                      json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                            "stream": True}) as response:
        assert response.status_code == 200
        assert read(server)["requests"]["active_streams"] == 1
    left = time.monotonic()
    after = wait_for(server, lambda s: s["requests"]["active_streams"] == 0, timeout=5)
    assert after["requests"]["active_streams"] == 0
    assert (after["requests"]["active"], after["requests"]["running"]) == (0, 0)
    assert time.monotonic() - left < 2


def test_latency_percentiles_are_the_simulated_ones(paced):
    client = paced.client()
    client.responses.create(model="gpt-4o-mini", input="hi")
    for _ in client.responses.create(model="gpt-4o-mini", input="hi", stream=True):
        pass
    latency = read(paced)["latency_ms"]
    assert latency["ttft"] == {"p50": 1000.0, "p90": 1000.0, "p99": 1000.0}
    assert latency["inter_token"] == {"p50": 20.0, "p90": 20.0, "p99": 20.0}
    assert latency["total"] == {"p50": 1180.0, "p90": 1180.0, "p99": 1180.0}
    assert latency["http"]["p50"] >= 1180.0          # measured: the simulated time and more


def test_stream_lateness_is_reported(paced):
    for _ in paced.client().responses.create(model="gpt-4o-mini", input="hi", stream=True):
        pass
    lateness = read(paced)["lateness_ms"]
    assert set(lateness) == {"p50", "p90", "p99", "max", "count"}
    assert lateness["count"] >= 10                 # one per batch: at least the 10 paced tokens
    assert 0 <= lateness["p50"] <= lateness["p90"] <= lateness["p99"] <= lateness["max"]


def test_metrics_off_keeps_no_counts_but_keeps_headers(live_server_factory):
    server = live_server_factory("--profile", "instant", "--no-metrics")
    raw = server.client().responses.with_raw_response.create(model="gpt-4o-mini", input="hi")
    assert raw.headers["x-request-id"].startswith("req_")
    assert raw.headers["x-llmsim-tokens"] == str(raw.parse().usage.output_tokens)
    stats = read(server)
    assert stats["enabled"] is False
    assert stats["requests"]["total"] == 0 and stats["tokens"]["total"] == 0


def test_chat_completions_are_counted_with_their_usage(fresh):
    client = fresh.client()
    before = read(fresh)
    answer = client.chat.completions.create(model="gpt-4o-mini",
                                            messages=[{"role": "user", "content": "hi"}])
    streamed = list(client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True}))
    after = wait_for(fresh, lambda s: s["requests"]["total"] == before["requests"]["total"] + 2)
    chat, old = after["endpoints"]["chat"], before["endpoints"]["chat"]
    assert (chat["requests"] - old["requests"], chat["streaming"] - old["streaming"]) == (2, 1)
    usages = [answer.usage, streamed[-1].usage]
    assert after["tokens"]["prompt"] - before["tokens"]["prompt"] == sum(u.prompt_tokens for u in usages)
    assert after["tokens"]["completion"] - before["tokens"]["completion"] == \
        sum(u.completion_tokens for u in usages)


def test_websocket_connections_and_turns_are_counted(fresh):
    client = fresh.client()
    before = read(fresh)["websocket"]
    with client.responses.connect() as conn:
        for text in ("one", "two"):
            conn.response.create(model="gpt-4o-mini", input=text)
            for event in conn:
                if event.type == "response.completed":
                    break
        during = read(fresh)["websocket"]
        conn.response.create(model="gpt-4o-mini", input="hi", previous_response_id="resp_missing")
        for event in conn:
            if event.type == "error":
                break
    after = wait_for(fresh, lambda s: s["websocket"]["active"] == before["active"])["websocket"]
    assert during["active"] - before["active"] == 1
    assert after["connections"] - before["connections"] == 1
    assert after["turns"] - before["turns"] == 2
    errors = read(fresh)["errors"]["real"]
    assert errors.get("previous_response_not_found", 0) >= 1


def test_counts_are_merged_across_workers(live_server_factory):
    server = live_server_factory("--profile", "instant", "--workers", "2")
    for _ in range(20):                             # a connection each: the workers share them
        with httpx.Client() as http:
            http.post(f"{server.base}/responses", json={"model": "gpt-4o-mini", "input": "hi"})
    stats = wait_for(server, lambda s: s["requests"]["total"] == 20 and s["workers"] == 2)
    assert stats["workers"] == 2
    assert stats["requests"]["total"] == stats["endpoints"]["responses"]["requests"] == 20
    assert stats["models"]["gpt-4o-mini"]["requests"] == 20
    expected = ('llmsim_requests_total{endpoint="responses"} 20.0', "llmsim_workers 2.0")
    deadline = time.monotonic() + 10               # the worker asked may see the other's
    while True:                                    # snapshot up to 0.25 s late
        metrics = httpx.get(f"{server.url}/metrics").text
        if all(line in metrics for line in expected) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert all(line in metrics for line in expected)


async def test_connections_opened_at_once_are_spread_over_the_workers(live_server_factory, tmp_path):
    """By default each worker listens on its own socket: a burst of 40 streams does not all
    land on the worker that woke first."""
    server = live_server_factory("--ttft-ms", "3000", "--workers", "2",
                                 "--stats-dir", str(tmp_path))
    body = b'{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    deadline = time.monotonic() + 30
    while len(list(tmp_path.glob("*.json"))) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)    # both workers are up (each writes a snapshot)
    await asyncio.sleep(0.3)        # and listening
    connections = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", server.port) for _ in range(40)))
    for _, writer in connections:
        writer.write(request)
    deadline = time.monotonic() + 10
    while True:                     # each worker writes its snapshot every 0.25 s
        await asyncio.sleep(0.1)
        streams = [json.loads(path.read_text())["active_streams"] for path in tmp_path.glob("*.json")]
        if sum(streams) == 40 or time.monotonic() > deadline:
            break
    for _, writer in connections:
        writer.close()
    assert len(streams) == 2 and sum(streams) == 40
    assert min(streams) >= 5


def test_percentiles_track_the_values_observed():
    import random

    from llmsim.observe import statsview
    from llmsim.observe.stats import Stats

    rng = random.Random(8)
    values = sorted(rng.lognormvariate(-2, 0.8) for _ in range(5000))
    stats = Stats()
    for value in values:
        stats.lateness.observe(value)
    merged = statsview.merge([stats.snapshot()])
    for q in (0.5, 0.9, 0.99):
        exact = values[int(q * len(values))]
        assert statsview.quantile(merged["lateness"], q) == pytest.approx(exact, rel=0.02)


async def test_a_slow_snapshot_write_does_not_hold_the_workers_streams(tmp_path, monkeypatch):
    """Under --workers the snapshot file is written off the event loop: while the write
    waits (as a rename waits on a disk that discards freed blocks), the loop runs on."""
    import threading

    from llmsim.observe import stats as stats_module

    release = threading.Event()
    loop_ran_during_write: list[bool] = []
    progress = [0]

    def slow_write(path, data):
        before = progress[0]
        release.wait(timeout=2)          # on the loop, this would wait the full 2 s
        loop_ran_during_write.append(progress[0] > before)
        path.write_bytes(data)

    monkeypatch.setattr(stats_module, "write_snapshot", slow_write)
    stats = stats_module.Stats(share_dir=str(tmp_path))
    stats.serving()
    for _ in range(20):
        progress[0] += 1
        await asyncio.sleep(0)
    release.set()
    for _ in range(200):
        if loop_ran_during_write:
            break
        await asyncio.sleep(0.01)
    stats.stopped()
    assert loop_ran_during_write == [True]
    assert (tmp_path / f"{__import__('os').getpid()}.json").exists()


async def test_a_worker_starting_after_its_server_removed_the_stats_directory_leaves_none(tmp_path):
    from llmsim.observe.stats import Stats

    stats = Stats(share_dir=str(tmp_path / "llmsim-stats-gone" / "stats"))
    stats.serving()
    stats.stopped()
    assert list(tmp_path.iterdir()) == []


def test_lateness_counted_in_batches_reads_as_each_value_counted_at_once():
    import random

    from llmsim.observe.stats import Histogram, Lateness

    rng = random.Random(3)
    values = [rng.choice([0.0, 1e-5, 0.0012, 0.25]) if rng.random() < 0.1 else rng.expovariate(300)
              for _ in range(Lateness.BATCH * 2 + 17)]
    batched, each = Lateness(), Histogram()
    for value in values:
        batched.add(value)
        each.observe(value)
    assert len(batched.pending) == 17                      # two full batches counted so far
    got, want = batched.snapshot(), each.snapshot()
    assert [(i, n) for i, n, _ in got["counts"]] == [(i, n) for i, n, _ in want["counts"]]
    assert [s for _, _, s in got["counts"]] == pytest.approx([s for _, _, s in want["counts"]])
    assert got["max"] == want["max"] and not batched.pending


def test_the_body_names_every_field_and_keys_rows_by_name(fresh):
    """The body's shape as a client reads it: its fields in order, and the per-endpoint,
    per-model, per-status and per-window objects keyed by name."""
    fresh.client().responses.create(model="gpt-4o-mini", input="shape")
    stats = wait_for(fresh, lambda s: s["models"].get("gpt-4o-mini", {}).get("requests", 0) >= 1)
    assert list(stats) == ["object", "enabled", "uptime_s", "workers", "requests", "endpoints", "websocket",
                           "tokens", "errors", "rates", "latency_ms", "lateness_ms", "webhooks", "models",
                           "timeline"]
    assert list(stats["requests"]) == ["total", "active", "streaming", "non_streaming", "active_streams",
                                       "running", "by_status"]
    assert stats["requests"]["by_status"]["2xx"] >= 1
    assert list(stats["endpoints"]["responses"]) == ["requests", "streaming", "errors"]
    assert list(stats["models"]["gpt-4o-mini"]) == ["requests", "prompt_tokens", "completion_tokens",
                                                    "reasoning_tokens", "running"]
    assert {name: list(rates) for name, rates in stats["rates"].items()} == {
        name: ["1s", "10s", "60s"] for name in ("requests_per_s", "tokens_per_s", "errors_per_s")}
    assert {name: list(p) for name, p in stats["latency_ms"].items()} == {
        name: ["p50", "p90", "p99"] for name in ("ttft", "total", "inter_token", "http")}
    assert list(stats["lateness_ms"]) == ["p50", "p90", "p99", "max", "count"]
    assert list(stats["webhooks"]) == ["queued", "sent", "failed", "delivered", "dropped"]
    assert [len(stats["timeline"][name]) for name in ("requests", "tokens", "errors")] == [60, 60, 60]
