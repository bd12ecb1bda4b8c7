"""The serving model for Anthropic Messages and the Gemini API, through their official SDKs
against one live server with `--prefix-cache`: a repeated long prompt reports its cached
prefix (`cache_read_input_tokens`, `cachedContentTokenCount`, in whole blocks) and answers
sooner; `cache_control` writes what is not read; the slots' queue refuses in each provider's
envelope (docs/serving-model.md).

Each test uses a model of its own, so their slots and caches do not meet."""
from __future__ import annotations

import asyncio
import time
import uuid

import anthropic
import httpx
import pytest
from google import genai
from google.genai import errors, types

import gemini_schemas
from anthropic_schemas import check_body

TTFT_MS = 100.0
PREFILL_MS = 0.25           # per uncached input token
BLOCK = 16
WORDS = 2000                # a prompt of a few thousand tokens: prefill of about a second


@pytest.fixture(scope="module")
def server(live_server_factory):
    srv = live_server_factory("--ttft-ms", str(TTFT_MS), "--tbt-ms", "5", "--target-tokens", "4",
                              "--prefill-ms-per-token", str(PREFILL_MS), "--prefix-cache",
                              "--max-concurrency", "1", "--max-queue", "1")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def claude(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)


@pytest.fixture(scope="module")
def gemini(server) -> genai.Client:
    return genai.Client(api_key="gk-test", http_options=types.HttpOptions(base_url=server.url))


def long_prompt(words: int = WORDS) -> str:
    return f"{uuid.uuid4().hex} " + " ".join(f"word{i % 97}" for i in range(words))


def claude_ttft(client, model: str, **kwargs) -> tuple[float, object]:
    """(seconds to the first text delta, message_start's usage) of one streamed message."""
    began, first, usage = time.perf_counter(), None, None
    for event in client.messages.create(model=model, max_tokens=64, stream=True, **kwargs):
        if event.type == "message_start":
            usage = event.message.usage
        if first is None and event.type == "content_block_delta":
            first = time.perf_counter() - began
    return first, usage


def test_anthropic_reads_a_repeated_prompt_from_the_prefix_cache_and_answers_sooner(claude):
    messages = [{"role": "user", "content": long_prompt()}]
    total = claude.messages.count_tokens(model="claude-sonnet-4-5", messages=messages).input_tokens
    cold, cold_usage = claude_ttft(claude, "claude-sonnet-4-5", messages=messages)
    warm, warm_usage = claude_ttft(claude, "claude-sonnet-4-5", messages=messages)
    assert (cold_usage.input_tokens, cold_usage.cache_read_input_tokens) == (total, 0)
    read = warm_usage.cache_read_input_tokens
    assert read > 0 and read % BLOCK == 0
    # all but the prompt's last partial block and the message's framing tokens (fewer than a
    # block; blocks cover the text's tokens: which side of a block boundary the framing falls
    # depends on the prompt's random start)
    assert warm_usage.input_tokens == total - read < 2 * BLOCK
    assert warm_usage.cache_creation_input_tokens == 0        # nothing marked: nothing written
    assert cold - warm >= 0.5 * PREFILL_MS * read / 1000, (cold, warm, read)


def test_anthropic_cache_control_writes_the_marked_prefix_not_read(claude):
    system = [{"type": "text", "text": long_prompt(800), "cache_control": {"type": "ephemeral"}}]
    question = [{"role": "user", "content": "What is in the system prompt?"}]
    marked = claude.messages.count_tokens(model="claude-haiku-4-5", system=system,
                                          messages=[]).input_tokens
    raw = claude.messages.with_raw_response.create(model="claude-haiku-4-5", max_tokens=64,
                                                   system=system, messages=question).http_response.json()
    check_body("message", raw)
    first = raw["usage"]
    again = claude.messages.create(model="claude-haiku-4-5", max_tokens=64, system=system,
                                   messages=question).usage
    total = first["input_tokens"] + first["cache_creation_input_tokens"]
    assert (first["cache_read_input_tokens"], first["cache_creation_input_tokens"]) == (0, marked)
    read = again.cache_read_input_tokens
    assert read % BLOCK == 0 and read > first["cache_creation_input_tokens"] - BLOCK    # its whole blocks
    assert again.cache_creation_input_tokens == max(0, first["cache_creation_input_tokens"] - read)
    assert again.input_tokens + read + again.cache_creation_input_tokens == total


def test_anthropic_requests_wait_for_a_slot_and_a_full_queue_gets_429(server):
    async def run():
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)
        results = await asyncio.gather(
            *(client.messages.create(model="claude-opus-4-1", max_tokens=16,
                                     messages=[{"role": "user", "content": f"hi {i}"}]) for i in range(3)),
            return_exceptions=True)
        await client.close()
        return results
    results = asyncio.run(run())
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(refused) == 1, results          # one answering, one waiting, one refused
    assert isinstance(refused[0], anthropic.RateLimitError)
    assert refused[0].body["error"]["type"] == "rate_limit_error"
    assert "at capacity" in refused[0].message


def gemini_ttft(client, model: str, prompt: str) -> tuple[float, object]:
    """(seconds to the first text, the last chunk's usageMetadata) of one streamed answer."""
    began, first, usage = time.perf_counter(), None, None
    for chunk in client.models.generate_content_stream(model=model, contents=prompt):
        if first is None and chunk.text:
            first = time.perf_counter() - began
        if chunk.usage_metadata is not None:
            usage = chunk.usage_metadata
    return first, usage


def test_gemini_reports_implicit_cache_hits_and_answers_sooner(gemini):
    prompt = long_prompt()
    cold, cold_usage = gemini_ttft(gemini, "gemini-2.5-flash", prompt)
    warm, warm_usage = gemini_ttft(gemini, "gemini-2.5-flash", prompt)
    assert not cold_usage.cached_content_token_count
    cached = warm_usage.cached_content_token_count
    assert cached > 0 and cached % BLOCK == 0
    assert warm_usage.prompt_token_count - cached <= BLOCK     # promptTokenCount counts the cached part too
    assert cold - warm >= 0.5 * PREFILL_MS * cached / 1000, (cold, warm, cached)


def test_gemini_body_with_cache_hits_matches_googles_shape(server):
    url = f"{server.url}/v1beta/models/gemini-2.0-flash:generateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": long_prompt(300)}]}]}
    with httpx.Client(trust_env=False, timeout=30) as http:
        http.post(url, json=body, headers={"x-goog-api-key": "gk-test"}).raise_for_status()
        again = http.post(url, json=body, headers={"x-goog-api-key": "gk-test"}).json()
    gemini_schemas.validate("GenerateContentResponse", again)
    assert again["usageMetadata"]["cachedContentTokenCount"] >= 300


def test_gemini_full_queue_gets_429_resource_exhausted(server):
    async def run():
        client = genai.Client(api_key="gk-test", http_options=types.HttpOptions(base_url=server.url))
        return await asyncio.gather(
            *(client.aio.models.generate_content(model="gemini-2.5-pro", contents=f"hi {i}") for i in range(3)),
            return_exceptions=True)
    refused = [r for r in asyncio.run(run()) if isinstance(r, Exception)]
    assert len(refused) == 1, refused
    assert isinstance(refused[0], errors.ClientError) and refused[0].code == 429
