"""The serving model switched on per model in the profile data (profiles.yaml `serving:`),
through the official SDK against one live server: running streams slow down when others join,
and /metrics reports the requests running and waiting (docs/serving-model.md)."""
from __future__ import annotations

import asyncio
import statistics
import time

import pytest
import yaml

from conftest import model_metrics
from llmsim import datafiles

TBT_MS = 50.0
TOKENS = 30
SLOTS = 4
SLOWDOWN = 3.0      # every slot busy: gaps three times as long


@pytest.fixture(scope="module")
def server(live_server_factory, tmp_path_factory):
    data = tmp_path_factory.mktemp("serving-data")
    profiles = yaml.safe_load((datafiles.DATA_DIR / "profiles.yaml").read_text())
    profiles["profiles"]["gpt-4o"]["serving"] = {"max_concurrency": SLOTS, "load_slowdown": SLOWDOWN}
    (data / "profiles.yaml").write_text(yaml.safe_dump(profiles))
    srv = live_server_factory("--data", str(data), "--ttft-ms", "200", "--tbt-ms", str(TBT_MS),
                              "--target-tokens", str(TOKENS))
    yield srv
    srv.stop()


async def token_times(client, model: str, joined: asyncio.Event | None = None, after: int = 0) -> list[float]:
    """When each content token of one streamed Chat completion arrived; sets `joined` after
    `after` tokens."""
    times = []
    stream = await client.chat.completions.create(model=model, stream=True,
                                                  messages=[{"role": "user", "content": "go"}])
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            times.append(time.perf_counter())
            if joined is not None and len(times) == after:
                joined.set()
    return times


def test_running_streams_slow_down_when_others_join(server):
    async def run():
        client = server.async_client()
        await client.models.list()          # the client's first request sets it up: not measured
        joined = asyncio.Event()
        alone = asyncio.create_task(token_times(client, "gpt-4o", joined, after=8))
        await asyncio.wait_for(joined.wait(), 30)
        others = [asyncio.create_task(token_times(client, "gpt-4o")) for _ in range(SLOTS - 1)]
        times = await alone
        await asyncio.gather(*others)
        await client.close()
        return times
    times = asyncio.run(run())
    gaps = [b - a for a, b in zip(times, times[1:])]
    before = statistics.median(gaps[1:7])               # alone
    after = statistics.median(gaps[14:])                # every slot busy
    assert before == pytest.approx(TBT_MS / 1000, rel=0.3)
    assert 0.8 * SLOWDOWN <= after / before <= 1.2 * SLOWDOWN, (before, after)


def test_a_model_without_serving_in_its_profile_is_not_slowed(server):
    async def run():
        client = server.async_client()
        await client.models.list()
        results = await asyncio.gather(*(token_times(client, "gpt-4o-mini") for _ in range(SLOTS)))
        await client.close()
        return results
    for times in asyncio.run(run()):
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert statistics.median(gaps) == pytest.approx(TBT_MS / 1000, rel=0.3)


def serving_metrics(url: str, model: str) -> tuple[float, float]:
    """vllm:num_requests_running and vllm:num_requests_waiting of `model`."""
    return model_metrics(url, model, "vllm:num_requests_running", "vllm:num_requests_waiting")


def test_metrics_report_running_and_waiting_requests(server):
    async def run():
        client = server.async_client()
        requests = [asyncio.create_task(client.chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "go"}])) for _ in range(SLOTS + 2)]
        seen = set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (SLOTS, 2) not in seen:
            seen.add(await asyncio.to_thread(serving_metrics, server.url, "gpt-4.1"))
            await asyncio.sleep(0.05)
        await asyncio.gather(*requests)
        await client.close()
        return seen
    seen = asyncio.run(run())
    assert (SLOTS, 2) in seen, seen
    assert serving_metrics(server.url, "gpt-4.1") == (0, 0)
