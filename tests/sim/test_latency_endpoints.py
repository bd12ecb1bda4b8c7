"""Every answering endpoint through its official SDK against live servers WITH simulated
latency (`--profile fast`, and explicit `--ttft-ms/--tbt-ms`), metrics on as by default: each
answers 200 with its usual shape, says its simulated timing in `x-llmsim-ttft-ms`, and is
counted in /llmsim/stats and /metrics. (The other SDK modules run on `--profile instant`,
where no plan has simulated time, so code that only runs on a clock is exercised here.)"""
from __future__ import annotations

import anthropic
import httpx
import pytest
from google import genai
from google.genai import types

from conftest import wait_for

FLAGS = {"fast": ("--profile", "fast"), "explicit": ("--ttft-ms", "20", "--tbt-ms", "2")}


@pytest.fixture(scope="module", params=sorted(FLAGS))
def server(request, live_server_factory):
    return live_server_factory(*FLAGS[request.param], "--target-tokens", "8")


@pytest.fixture(scope="module")
def client(server):
    return server.client()


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)


@pytest.fixture(scope="module")
def gemini(server):
    return genai.Client(api_key="gk-test", http_options=types.HttpOptions(base_url=server.url))


def timed(raw) -> float:
    """The simulated time to the first token a raw SDK response reports, in ms."""
    return float(raw.headers["x-llmsim-ttft-ms"])


def test_embeddings_answer_under_a_latency_profile(client):
    raw = client.embeddings.with_raw_response.create(model="text-embedding-3-small", input=["a b", "c"])
    assert [len(d.embedding) for d in raw.parse().data] == [1536, 1536]
    assert timed(raw) > 0


def test_moderations_answer_under_a_latency_profile(client):
    raw = client.moderations.with_raw_response.create(input="a kind word")
    assert raw.parse().results[0].flagged is False
    assert timed(raw) > 0


def test_chat_completions_answer_and_stream(client):
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert raw.parse().choices[0].message.content and timed(raw) > 0
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens > 0


def test_completions_answer_and_stream(client):
    raw = client.completions.with_raw_response.create(model="gpt-3.5-turbo-instruct", prompt="hi")
    assert raw.parse().choices[0].text and timed(raw) > 0
    assert "".join(c.choices[0].text for c in client.completions.create(
        model="gpt-3.5-turbo-instruct", prompt="hi", stream=True) if c.choices)


def test_responses_answer_and_stream(client):
    raw = client.responses.with_raw_response.create(model="gpt-5", input="hi")
    assert raw.parse().output_text and timed(raw) > 0
    events = list(client.responses.create(model="gpt-5", input="hi", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text


def test_responses_compact_answers(client):
    compacted = client.responses.compact(model="gpt-5", input=[{"role": "user", "content": "Tell me about tides"}])
    assert compacted.output and compacted.usage.output_tokens > 0


def test_a_responses_websocket_turn_answers(client):
    with client.responses.connect() as conn:
        conn.response.create(model="gpt-5", input="hi")
        for event in conn:
            if event.type in ("response.completed", "response.failed", "error"):
                break
    assert event.type == "response.completed" and event.response.output_text


def test_anthropic_messages_answer_and_stream(claude):
    raw = claude.messages.with_raw_response.create(model="claude-sonnet-4-5", max_tokens=50,
                                                   messages=[{"role": "user", "content": "hi"}])
    assert raw.parse().content[0].text and timed(raw) > 0
    with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=50,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        assert "".join(stream.text_stream)


def test_gemini_generate_content_answers_and_streams(gemini):
    assert gemini.models.generate_content(model="gemini-2.5-flash", contents="hi").text
    assert "".join(c.text or "" for c in gemini.models.generate_content_stream(
        model="gemini-2.5-flash", contents="hi"))


def test_gemini_embed_content_answers(gemini):
    result = gemini.models.embed_content(model="gemini-embedding-001", contents=["a b", "c"])
    assert len(result.embeddings) == 2 and all(e.values for e in result.embeddings)


def test_every_endpoint_is_counted_in_stats_and_metrics(server, client):
    client.embeddings.create(model="text-embedding-3-small", input="counted")
    client.moderations.create(input="counted")
    wanted = {"text-embedding-3-small", "omni-moderation-latest"}

    def counted():
        return wanted <= set(httpx.get(server.url + "/llmsim/stats").json()["models"])
    assert wait_for(counted, timeout=10), "embeddings and moderations are counted per model"
    metrics = httpx.get(server.url + "/metrics")
    assert metrics.status_code == 200 and 'model_name="text-embedding-3-small"' in metrics.text
