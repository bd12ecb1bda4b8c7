"""The serving model's slots and queue belong to the host: with `--workers 2 --max-concurrency 1`
one request of a model is answered at a time whichever worker takes it, the `--max-queue` cap
holds for the host, WebSocket turns and background responses wait for a slot like HTTP
requests, and the TTFT llmsim reports includes the wait (docs/serving-model.md).

Through the official SDK against one live server; each test uses a model of its own, so their
slots do not meet. A new client per request opens a new connection, which either worker may
accept."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import httpx
import openai
import orjson
import pytest

from conftest import model_metrics
from llmsim.state import hostslots

TTFT_S = 0.2
TBT_S = 0.02
TOKENS = 3
HOLD_S = TTFT_S + (TOKENS - 1) * TBT_S      # how long a short answer holds the slot
PREFILL_MS = 0.5                            # per input token: a long prompt holds the slot longer
HOLDER = "hold " * 1000                     # about 0.5 s of prefill: time for a test's next request to come
QUEUE = 3
MODELS = ("gpt-4o", "gpt-4.1", "gpt-4o-mini", "gpt-4.1-nano", "gpt-4.1-mini", "gpt-4", "gpt-3.5-turbo")


@pytest.fixture(scope="module")
def server(live_server_factory):
    srv = live_server_factory("--workers", "2", "--ttft-ms", str(TTFT_S * 1000), "--tbt-ms", str(TBT_S * 1000),
                              "--target-tokens", str(TOKENS), "--max-concurrency", "1",
                              "--max-queue", str(QUEUE), "--prefill-ms-per-token", str(PREFILL_MS))
    asyncio.run(warm_up(srv))
    yield srv
    srv.stop()


async def warm_up(server) -> None:
    """The first answers of each worker (of each tokenizer) take longer: not measured. Two
    answers of each model, on a connection each, at once (whichever worker takes them)."""
    clients = [server.async_client() for _ in range(2 * len(MODELS))]
    await asyncio.gather(*(client.chat.completions.create(model=MODELS[i % len(MODELS)], stream=True,
                                                         messages=[{"role": "user", "content": "warm"}])
                           for i, client in enumerate(clients)))
    for client in clients:
        await client.close()


def hold(server, model: str, prompt: str = HOLDER):
    """A streamed Chat completion of a long prompt holding the model's slot: its headers have
    come, so it has the slot, for at least HOLD_S from now (and its prefill). (client, stream):
    read the stream, then close both."""
    client = server.client()
    return client, client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                                  stream=True)


def drain(held) -> None:
    client, stream = held
    for _ in stream:
        pass
    client.close()


async def first_token(client, model: str, since: float) -> float:
    """Seconds from `since` to the first token of a streamed Chat completion."""
    stream = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                                  stream=True)
    first = None
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - since
    return first


def test_concurrent_requests_on_both_workers_wait_for_one_slot(server):
    k = 4

    async def run():
        clients = [server.async_client() for _ in range(k)]     # one connection each
        since = time.perf_counter()
        ttfts = await asyncio.gather(*(first_token(client, "gpt-4o", since) for client in clients))
        for client in clients:
            await client.close()
        return sorted(ttfts)
    ttfts = asyncio.run(run())
    assert ttfts[0] >= TTFT_S, ttfts
    for before, after in zip(ttfts, ttfts[1:]):     # each waits for the one before it, on any worker
        assert HOLD_S - 0.05 <= after - before <= HOLD_S + 0.2, ttfts


def test_the_queue_cap_holds_for_the_host(server):
    extra = 2

    async def one(client):
        try:
            await client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}])
        except openai.RateLimitError as exc:
            return exc
        return None

    async def run():
        clients = [server.async_client() for _ in range(QUEUE + extra)]    # one connection each
        held = await asyncio.to_thread(hold, server, "gpt-4.1")
        try:
            return await asyncio.gather(*(one(client) for client in clients))
        finally:
            await asyncio.to_thread(drain, held)
            for client in clients:
                await client.close()
    outcomes = asyncio.run(run())
    refused = [exc for exc in outcomes if exc is not None]
    assert len(refused) == extra, outcomes
    for exc in refused:
        assert exc.code == "rate_limit_exceeded" and "at capacity" in exc.message
        assert exc.response.headers["retry-after"] == "1"


def serving_metrics(url: str, model: str) -> tuple[float, float]:
    """vllm:num_requests_running and vllm:num_requests_waiting of `model`."""
    return model_metrics(url, model, "vllm:num_requests_running", "vllm:num_requests_waiting")


def test_metrics_report_the_hosts_requests_until_their_clients_go_away(server):
    async def run():
        clients = [server.async_client() for _ in range(QUEUE)]        # one connection each
        held = await asyncio.to_thread(hold, server, "gpt-4", HOLDER * 3)   # about 1.5 s: time to look
        queued = [asyncio.create_task(client.chat.completions.create(
            model="gpt-4", messages=[{"role": "user", "content": "hi"}])) for client in clients]
        seen = set()
        deadline = time.monotonic() + 10
        while (1, QUEUE) not in seen and time.monotonic() < deadline and not all(t.done() for t in queued):
            seen.add(await asyncio.to_thread(serving_metrics, server.url, "gpt-4"))
            await asyncio.sleep(0.02)
        held[1].close()                 # every client goes away: the slot and the places are given back
        held[0].close()
        for task in queued:
            task.cancel()
        await asyncio.gather(*queued, return_exceptions=True)
        for client in clients:
            await client.close()
        while (after := await asyncio.to_thread(serving_metrics, server.url, "gpt-4")) != (0, 0) \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return seen, after
    seen, after = asyncio.run(run())
    assert (1, QUEUE) in seen, seen     # one answered and three waiting, whichever worker has them
    assert after == (0, 0)


def test_a_websocket_turn_waits_for_a_slot_held_by_an_http_stream(server):
    first = None
    with server.client() as client, client.responses.connect() as conn:
        held = hold(server, "gpt-4o-mini")
        since = time.perf_counter()
        try:
            conn.response.create(model="gpt-4o-mini", input="hi")
            for event in conn:
                if first is None and event.type == "response.output_text.delta":
                    first = time.perf_counter() - since
                if event.type in ("response.completed", "error"):
                    break
        finally:
            drain(held)
    assert event.type == "response.completed"
    assert first >= HOLD_S + TTFT_S - 0.1, first        # not before the stream gave its slot back


def test_a_websocket_turn_beyond_the_queue_gets_the_capacity_error_event(server):
    assert httpx.patch(server.url + "/llmsim/config", json={"max_queue": 0}).status_code == 200
    try:
        with server.client() as client, client.responses.connect() as conn:
            held = hold(server, "gpt-4.1-nano")
            try:
                conn.response.create(model="gpt-4.1-nano", input="hi")
                event = next(iter(conn))
            finally:
                drain(held)
    finally:
        httpx.delete(server.url + "/llmsim/config")
    assert event.type == "error"
    assert (event.status, event.error.code) == (429, "rate_limit_exceeded")


def test_a_background_response_stays_queued_until_it_has_a_slot(server):
    with server.client() as client:
        client.models.list()            # (its connection is open: the request comes at once)
        held = hold(server, "gpt-4.1-mini")
        since = time.perf_counter()
        try:
            created = client.responses.create(model="gpt-4.1-mini", input="hi", background=True)
            status = client.responses.retrieve(created.id).status
            early = time.perf_counter() - since < HOLD_S - 0.05     # read while the slot was surely held
            while (answer := client.responses.retrieve(created.id)).status in ("queued", "in_progress"):
                time.sleep(0.02)
            took = time.perf_counter() - since
        finally:
            drain(held)
    assert created.status == "queued"
    assert status == "queued" or not early, status
    assert answer.status == "completed"
    assert took >= HOLD_S + TTFT_S - 0.1, took


def ttft_metric(url: str, model: str) -> tuple[float, float]:
    """(count, sum) of vllm:time_to_first_token_seconds for `model`, over the workers."""
    return model_metrics(url, model, "vllm:time_to_first_token_seconds_count",
                         "vllm:time_to_first_token_seconds_sum")


def test_the_reported_ttft_includes_the_wait_for_a_slot(server):
    with server.client() as client:
        client.models.list()            # (its connection is open: the request comes at once)
        held = hold(server, "gpt-4-turbo", HOLDER * 4)     # about 2 s of prefill: on a busy machine the
        try:                                                # next request surely comes while it is held
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4-turbo", messages=[{"role": "user", "content": "hi"}])
        finally:
            drain(held)
    ttft_s = float(raw.headers["x-llmsim-ttft-ms"]) / 1000
    assert ttft_s >= TTFT_S + 0.5 * HOLD_S, ttft_s     # the profile's TTFT, after most of the hold
    holder_s = float(held[1].response.headers["x-llmsim-ttft-ms"]) / 1000
    deadline = time.monotonic() + 10
    while (metric := ttft_metric(server.url, "gpt-4-turbo"))[0] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)        # (each worker shares its stats every 0.25 s)
    count, total = metric
    assert count == 2 and total == pytest.approx(holder_s + ttft_s, abs=0.002), (metric, holder_s, ttft_s)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_the_slots_of_a_process_that_died_are_taken_back(tmp_path):
    (tmp_path / hostslots.FILE_NAME).write_bytes(orjson.dumps(
        {"gpt-4o": {"run": [dead_pid()], "queue": [[0, dead_pid()]], "next": 1}}))
    slots = hostslots.HostSlots(hostslots.SlotFile(tmp_path), "gpt-4o")
    assert slots.enter(1, None, AssertionError) is None         # a slot at once: the dead hold none
    slots.release()
    state = orjson.loads((tmp_path / hostslots.FILE_NAME).read_bytes())["gpt-4o"]
    assert state["run"] == state["queue"] == []


def test_a_waiter_that_goes_away_leaves_the_queue(tmp_path):
    async def run():
        first = hostslots.HostSlots(hostslots.SlotFile(tmp_path), "gpt-4o")
        assert first.enter(1, None, AssertionError) is None
        number = first.enter(1, None, AssertionError)
        waiter = asyncio.create_task(first.wait(number))
        await asyncio.sleep(0.05)
        waiter.cancel()                 # (a client that disconnects while queued)
        await asyncio.gather(waiter, return_exceptions=True)
        first.release()
        other = hostslots.HostSlots(hostslots.SlotFile(tmp_path), "gpt-4o")
        return other.enter(1, None, AssertionError), (first.running, first.waiting)
    assert asyncio.run(run()) == (None, (0, 0))       # the slot is free: nobody waits before it
