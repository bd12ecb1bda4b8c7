"""The serving model through the official SDK against one live server: requests wait for a slot
in order, TTFT grows with the queue and with uncached input tokens, the prefix cache reports
cached_tokens and shortens prefill, a full queue answers 429 (docs/serving-model.md).

Each test uses a model of its own, so their slots and caches do not meet."""
from __future__ import annotations

import asyncio
import time
import uuid

import openai
import pytest

TTFT_MS = 600.0             # large, so a busy machine's few ms of overhead stay well within 10%
TBT_MS = 10.0
TOKENS = 4
PREFILL_MS = 0.5            # per uncached input token
BLOCK = 16
SLACK = 0.10                # "within 10%"


@pytest.fixture(scope="module")
def server(live_server_factory):
    srv = live_server_factory("--ttft-ms", str(TTFT_MS), "--tbt-ms", str(TBT_MS),
                              "--target-tokens", str(TOKENS), "--max-concurrency", "1",
                              "--max-queue", "7", "--prefill-ms-per-token", str(PREFILL_MS),
                              "--prefix-cache")
    client = srv.client()       # the first answers of a new server take longer: not measured
    client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "warm"}], stream=True)
    client.responses.create(model="gpt-5", input="warm up", stream=True)
    client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "warm"}])
    yield srv
    srv.stop()


def service_s(prompt_tokens: int) -> float:
    """How long one request holds its slot: prefill, TTFT, then the gaps of its tokens."""
    return (PREFILL_MS * prompt_tokens + TTFT_MS + (TOKENS - 1) * TBT_MS) / 1000


async def chat_ttft(client, model: str, content: str, **extra) -> tuple[float, object]:
    """(seconds to the first content token, the usage) of one streamed Chat completion."""
    began = time.perf_counter()
    first, usage = None, None
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}], stream=True,
        stream_options={"include_usage": True}, **extra)
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - began
        if chunk.usage is not None:
            usage = chunk.usage
    return first, usage


def long_prompt(words: int) -> str:
    return f"{uuid.uuid4().hex} " + " ".join(f"word{i % 97}" for i in range(words))


def test_ttft_grows_with_queue_position(server):
    async def run():
        client = server.async_client()
        await client.models.list()          # the client's first request sets it up: not measured
        results = await asyncio.gather(*(chat_ttft(client, "gpt-4o", f"hi {i}") for i in range(8)))
        await client.close()
        return results
    results = asyncio.run(run())
    prompt = results[0][1].prompt_tokens
    measured = sorted(ttft for ttft, _ in results)
    for position, ttft in enumerate(measured):
        predicted = position * service_s(prompt) + (PREFILL_MS * prompt + TTFT_MS) / 1000
        assert abs(ttft - predicted) <= SLACK * predicted, (position, measured)


def test_ttft_grows_with_uncached_input_tokens(server):
    async def run():
        client = server.async_client()
        await client.models.list()
        out = [await chat_ttft(client, "gpt-4.1", long_prompt(words)) for words in (10, 1000, 2000)]
        await client.close()
        return out
    for ttft, usage in asyncio.run(run()):
        assert usage.prompt_tokens_details.cached_tokens == 0
        predicted = (TTFT_MS + PREFILL_MS * usage.prompt_tokens) / 1000
        assert abs(ttft - predicted) <= SLACK * predicted, (usage.prompt_tokens, ttft, predicted)


def test_a_repeated_long_prompt_is_cached_and_answers_sooner(server):
    client = server.client()
    prompt = long_prompt(2000)

    def ttft_and_usage():
        began, first, usage = time.perf_counter(), None, None
        with client.responses.stream(model="gpt-4.1-mini", input=prompt) as stream:
            for event in stream:
                if first is None and event.type == "response.output_text.delta":
                    first = time.perf_counter() - began
                if event.type == "response.completed":
                    usage = event.response.usage
        return first, usage

    cold, cold_usage = ttft_and_usage()
    warm, warm_usage = ttft_and_usage()
    assert cold_usage.input_tokens_details.cached_tokens == 0
    cached = warm_usage.input_tokens_details.cached_tokens
    assert cached > 0 and cached % BLOCK == 0
    assert warm_usage.input_tokens - cached <= 2 * BLOCK      # all but the last partial block
    assert cold - warm >= 0.8 * PREFILL_MS * cached / 1000, (cold, warm, cached)


def test_chat_reports_cached_prompt_tokens(server):
    client = server.client()
    messages = [{"role": "system", "content": long_prompt(500)}, {"role": "user", "content": "hello"}]
    first = client.chat.completions.create(model="gpt-4.1-nano",
                                           messages=messages)
    again = client.chat.completions.create(model="gpt-4.1-nano", messages=messages)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached >= 500 and cached % BLOCK == 0


def test_prompt_cache_key_partitions_the_cache(server):
    client = server.client()
    prompt = long_prompt(300)
    client.responses.create(model="gpt-5.1", input=prompt, prompt_cache_key="tenant-a")
    other = client.responses.create(model="gpt-5.1", input=prompt, prompt_cache_key="tenant-b")
    same = client.responses.create(model="gpt-5.1", input=prompt, prompt_cache_key="tenant-a")
    assert other.usage.input_tokens_details.cached_tokens == 0
    assert same.usage.input_tokens_details.cached_tokens >= 300


def test_a_full_queue_answers_429_at_capacity(server):
    async def run():
        client = server.async_client()
        results = await asyncio.gather(
            *(client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
              for _ in range(10)), return_exceptions=True)
        await client.close()
        return results
    results = asyncio.run(run())
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(refused) == 2, results          # one answering, seven waiting, the rest refused
    for error in refused:
        assert isinstance(error, openai.RateLimitError)
        assert error.code == "rate_limit_exceeded"
        assert "at capacity" in error.message
        assert error.response.headers["retry-after"]
