"""Simulated timing. Behaviour runs in-process on a FakeClock (instant and exact): each SSE
event is stamped with the fake time at which the app wrote it. One live test checks that real
clients see the configured timing (loose bounds: the machine is shared)."""
from __future__ import annotations

import asyncio
import statistics
import time

import httpx
import orjson
import pytest

import sse
from llmsim.app import create_app
from llmsim.clock import FakeClock
from llmsim.settings import Settings

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own


class TimedApp:
    """An app on a FakeClock, driven through ASGI so every body chunk is timed when sent."""

    def __init__(self, **settings):
        self.clock = FakeClock()
        self.app = create_app(Settings(**settings), clock=self.clock)

    async def post(self, body: dict) -> list[tuple[float, str | None, object]]:
        """(seconds since the request began, event name, data) per event; a JSON body is one
        entry named None."""
        payload = orjson.dumps(body)
        received = asyncio.Event()
        self.chunks = chunks = []  # (seconds since start, bytes) per body chunk

        async def receive():
            if not received.is_set():
                received.set()
                return {"type": "http.request", "body": payload, "more_body": False}
            await asyncio.Event().wait()  # the client never disconnects

        async def send(message):
            if message["type"] == "http.response.body" and message.get("body"):
                chunks.append((self.clock.now() - start, message["body"]))

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/v1/responses", "raw_path": b"/v1/responses",
                 "query_string": b"", "root_path": "", "server": ("sim", 80), "client": ("test", 1),
                 "headers": [(b"host", b"sim"), (b"content-type", b"application/json"),
                             (b"content-length", str(len(payload)).encode())]}
        start = self.clock.now()
        await self.app(scope, receive, send)
        if not body.get("stream"):
            return [(chunks[-1][0], None, orjson.loads(b"".join(c for _, c in chunks)))]
        return [(at, name, data) for at, chunk in chunks for name, data in sse.parse(chunk.decode())]


def times_of(events, name):
    return [at for at, event, _ in events if event == name]


async def test_fixed_ttft_and_gap_set_the_text_delta_times():
    app = TimedApp(ttft_ms=200, tbt_ms=20, target_tokens=10)
    events = await app.post({"model": "gpt-4o", "input": "hi", "stream": True})
    assert times_of(events, "response.output_text.delta") == pytest.approx([0.2 + 0.02 * i for i in range(10)])


async def test_every_answer_of_a_fixed_profile_keeps_its_times():
    """Answers of one length share their due times (llmsim.sim.latency.fixed_times): answers
    after one whose text starts later (after reasoning) have their own, each time."""
    app = TimedApp(ttft_ms=210, tbt_ms=30, target_tokens=7)   # times no other test asks for
    reasoned = times_of(await app.post({"model": "o3-mini", "input": "hi", "stream": True}),
                        "response.output_text.delta")
    plain = {"model": "gpt-4o", "input": "hi", "stream": True}
    first = times_of(await app.post(plain), "response.output_text.delta")
    again = times_of(await app.post(plain), "response.output_text.delta")
    expected = [0.21 + 0.03 * i for i in range(7)]
    assert reasoned[0] > 0.3
    assert first == pytest.approx(expected) and again == pytest.approx(expected)


async def test_created_and_in_progress_are_sent_at_once():
    app = TimedApp(ttft_ms=500, tbt_ms=20, target_tokens=5)
    events = await app.post({"model": "gpt-4o", "input": "hi", "stream": True})
    assert times_of(events, "response.created") == times_of(events, "response.in_progress") == [0.0]


async def test_completed_is_sent_with_the_last_token():
    app = TimedApp(ttft_ms=100, tbt_ms=10, target_tokens=20)
    events = await app.post({"model": "gpt-4o", "input": "hi", "stream": True})
    last_token = times_of(events, "response.output_text.delta")[-1]
    assert times_of(events, "response.completed") == [pytest.approx(last_token)]


async def test_reasoning_takes_its_tokens_time_before_the_first_text():
    app = TimedApp(ttft_ms=100, tbt_ms=10, target_tokens=20)
    events = await app.post({"model": "o3", "input": "hi", "stream": True, "reasoning": {"effort": "low"}})
    # low effort: 1.5 x 20 = 30 reasoning tokens at 10 ms each, after the first token time
    assert times_of(events, "response.output_text.delta")[0] == pytest.approx(0.1 + 30 * 0.01)


async def test_reasoning_summary_streams_while_reasoning():
    app = TimedApp(ttft_ms=100, tbt_ms=10, target_tokens=20)
    events = await app.post({"model": "o3", "input": "hi", "stream": True,
                             "reasoning": {"effort": "high", "summary": "detailed"}})
    summary = times_of(events, "response.reasoning_summary_text.delta")
    first_text = times_of(events, "response.output_text.delta")[0]
    assert summary and 0.1 <= summary[0] and summary[-1] <= first_text == pytest.approx(0.1 + 120 * 0.01)


@pytest.mark.parametrize("model", ["gpt-4o", "o3"])
async def test_non_streaming_takes_as_long_as_the_stream(model):
    """Same seed, same request: the JSON body is sent when the stream would have ended."""
    body = {"model": model, "input": "hi"}
    streamed = await TimedApp(seed=5).post({**body, "stream": True})
    plain = await TimedApp(seed=5).post(body)
    assert plain[0][0] == pytest.approx(streamed[-1][0])
    assert plain[0][0] > 0.5


async def test_instant_profile_sends_everything_at_time_zero():
    events = await TimedApp(profile="instant").post({"model": "o3", "input": "hi", "stream": True})
    assert {at for at, _, _ in events} == {0.0}


PROFILES = {  # name: model using it, ttft mean/sd, gap mean/sd (ms), from llmsim/data/profiles.yaml
    "gpt-4o": ("gpt-4o", 400, 100, 25, 8),
    "claude-haiku": ("claude-haiku-4-5", 200, 50, 15, 5),
    "gpt-4": ("gpt-4", 800, 200, 50, 15),
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_model_profile_sets_ttft_and_gap_distributions(profile):
    model, ttft_mean, ttft_sd, gap_mean, gap_sd = PROFILES[profile]
    app = TimedApp(seed=11, target_tokens=20)
    ttfts, gaps = [], []
    for _ in range(150):
        deltas = times_of(await app.post({"model": model, "input": "hi", "stream": True}),
                          "response.output_text.delta")
        ttfts.append(deltas[0] * 1000)
        gaps += [(b - a) * 1000 for a, b in zip(deltas, deltas[1:])]
    assert statistics.mean(ttfts) == pytest.approx(ttft_mean, rel=0.1)
    assert statistics.stdev(ttfts) == pytest.approx(ttft_sd, rel=0.25)
    assert statistics.mean(gaps) == pytest.approx(gap_mean, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(gap_sd, rel=0.15)


async def test_profile_setting_forces_one_profile_for_every_model():
    app = TimedApp(profile="fast", target_tokens=5)
    for model in ("gpt-4", "o3", "claude-opus-4-1"):
        deltas = times_of(await app.post({"model": model, "input": "hi", "stream": True,
                                          "reasoning": {"effort": "low"}}), "response.output_text.delta")
        assert deltas[-1] < 0.1  # fast: ~10 ms to first token, 1 ms gaps


async def test_keepalive_comments_while_waiting_for_the_first_token():
    app = TimedApp(ttft_ms=1000, tbt_ms=10, target_tokens=3, keepalive_ms=300)
    events = await app.post({"model": "gpt-4o", "input": "hi", "stream": True})
    comments = [at for at, chunk in app.chunks if chunk.startswith(b": ")]
    assert comments == pytest.approx([0.3, 0.6, 0.9])
    assert times_of(events, "response.output_text.delta")[0] == pytest.approx(1.0)


async def test_no_keepalive_comments_by_default():
    app = TimedApp(ttft_ms=1000, tbt_ms=10, target_tokens=3)
    await app.post({"model": "gpt-4o", "input": "hi", "stream": True})
    assert not [chunk for _, chunk in app.chunks if chunk.startswith(b":")]


def test_live_server_timing_matches_the_configuration(live_server_factory):
    server = live_server_factory("--ttft-ms", "200", "--tbt-ms", "20", "--target-tokens", "30")
    stamps = []
    with httpx.Client(timeout=30) as http:
        start = time.perf_counter()
        with http.stream("POST", f"{server.base}/responses",
                         json={"model": "gpt-4o", "input": "hi", "stream": True}) as response:
            for line in response.iter_lines():
                if line == "event: response.output_text.delta":
                    stamps.append(time.perf_counter() - start)
    assert len(stamps) == 30
    assert 0.18 <= stamps[0] <= 0.6
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert 0.012 <= statistics.median(gaps) <= 0.05
    assert 0.18 + 29 * 0.02 * 0.9 <= stamps[-1] <= 2.0
