"""POST /v1/completions (legacy) through the openai SDK against a live server: JSON and SSE,
prompts as text or token arrays, max_tokens (default 16) and finish_reason length, echo, n,
stop, exact usage, OpenAI's schema, faults and stats."""
from __future__ import annotations

import httpx
import openai
import pytest

import oai_schemas
from conftest import LiveServer
from counting import reference

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

MODEL = "gpt-3.5-turbo-instruct"


@pytest.fixture(scope="module")
def server():
    live = LiveServer("--profile", "instant", "--target-tokens", "40")
    yield live
    live.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def tokens(text):
    return len(reference("cl100k_base").encode(text))


def test_a_completion_counts_prompt_and_text_exactly(client):
    done = client.completions.create(model=MODEL, prompt="Write a haiku about the sea", max_tokens=200)
    [choice] = done.choices
    assert done.object == "text_completion" and done.id.startswith("cmpl-")
    assert choice.finish_reason == "stop" and choice.text
    assert done.usage.prompt_tokens == tokens("Write a haiku about the sea")
    assert done.usage.completion_tokens == tokens(choice.text)
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens


def test_max_tokens_defaults_to_16_and_cuts_with_length(client):
    done = client.completions.create(model=MODEL, prompt="Tell me a long story")
    assert done.choices[0].finish_reason == "length"
    assert done.usage.completion_tokens == 16
    short = client.completions.create(model=MODEL, prompt="Tell me a long story", max_tokens=3)
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 3


def test_echo_puts_the_prompt_first(client):
    done = client.completions.create(model=MODEL, prompt="Echo me: ", echo=True, max_tokens=4)
    assert done.choices[0].text.startswith("Echo me: ")
    assert len(done.choices[0].text) > len("Echo me: ")


def test_n_choices_per_prompt_are_indexed_in_order(client):
    done = client.completions.create(model=MODEL, prompt=["first", "second"], n=3, max_tokens=5, echo=True)
    assert [c.index for c in done.choices] == list(range(6))
    assert [c.text.split("first")[0] == "" for c in done.choices[:3]] == [True] * 3
    assert all(c.text.startswith("second") for c in done.choices[3:])
    assert done.usage.prompt_tokens == tokens("first") + tokens("second")


def test_a_token_array_prompt_counts_its_tokens(client):
    ids = reference("cl100k_base").encode("A prompt given as tokens")
    done = client.completions.create(model=MODEL, prompt=ids, max_tokens=5, echo=True)
    assert done.usage.prompt_tokens == len(ids)
    assert done.choices[0].text.startswith("A prompt given as tokens")


def test_a_stop_sequence_ends_the_text_before_it(client):
    done = client.completions.create(model=MODEL, prompt="x", max_tokens=100)
    word = done.choices[0].text.split()[3]
    stopped = client.completions.create(model=MODEL, prompt="x", max_tokens=100, stop=[word])
    assert word not in stopped.choices[0].text and stopped.choices[0].finish_reason == "stop"


def test_the_stream_sends_the_same_text_token_by_token(client):
    whole = client.completions.create(model=MODEL, prompt="Stream this", max_tokens=30)
    chunks = list(client.completions.create(model=MODEL, prompt="Stream this", max_tokens=30, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == whole.choices[0].finish_reason and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_a_streamed_echo_sends_the_prompt_first(client):
    chunks = list(client.completions.create(model=MODEL, prompt="Hello there", echo=True, max_tokens=3,
                                            stream=True))
    assert chunks[0].choices[0].text == "Hello there"
    assert len(chunks) == 1 + 3 + 1          # the prompt, three tokens, the finish


def test_bodies_and_chunks_match_openais_schema(server):
    url = f"{server.base}/completions"
    body = httpx.post(url, json={"model": MODEL, "prompt": ["a", "b"], "n": 2, "echo": True}).json()
    oai_schemas.validate("CreateCompletionResponse", body)
    with httpx.stream("POST", url, json={"model": MODEL, "prompt": "a", "stream": True,
                                         "stream_options": {"include_usage": True}}) as r:
        lines = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [httpx.Response(200, content=line).json() for line in lines[:-1]]
    for chunk in chunks:        # departure completion-chunk-finish-reason-null: null until a choice ends
        choices = [{**c, "finish_reason": c["finish_reason"] or "stop"} for c in chunk["choices"]]
        oai_schemas.validate("CreateCompletionResponse", {**chunk, "choices": choices})
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]].count(None) == len(chunks) - 2


def test_too_many_tokens_for_the_model_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt="x", max_tokens=4096)
    assert err.value.code == "context_length_exceeded" and err.value.param == "prompt"


def test_a_fault_cuts_the_stream_with_an_error_chunk(client):
    stream = client.completions.create(model=MODEL, prompt="x", max_tokens=30, stream=True,
                                       extra_headers={"x-llmsim-fault": "stream_error;after_tokens=2"})
    with pytest.raises(openai.APIError):
        list(stream)


def test_a_content_filter_fault_cuts_the_text(client):
    done = client.completions.create(model=MODEL, prompt="x", max_tokens=30,
                                     extra_headers={"x-llmsim-fault": "content_filter;after_tokens=2"})
    assert done.choices[0].finish_reason == "content_filter" and done.usage.completion_tokens == 2


def test_stats_count_completions_requests(server, client):
    def counts():
        return httpx.get(f"{server.url}/llmsim/stats").json()["endpoints"].get("completions", {})
    before = counts()
    client.completions.create(model=MODEL, prompt="x", max_tokens=2)
    list(client.completions.create(model=MODEL, prompt="x", max_tokens=2, stream=True))
    after = counts()
    assert after["requests"] - before.get("requests", 0) == 2
    assert after["streaming"] - before.get("streaming", 0) == 1


def test_metrics_count_completions_requests(server, client):
    client.completions.create(model=MODEL, prompt="x", max_tokens=2)
    text = httpx.get(f"{server.url}/metrics").text
    assert any(line.startswith('llmsim_requests_total{endpoint="completions"}') for line in text.splitlines())


def test_a_null_prompt_starts_from_nothing(server):
    body = httpx.post(f"{server.base}/completions", json={"model": MODEL, "prompt": None, "max_tokens": 3}).json()
    assert body["usage"]["prompt_tokens"] == 0 and body["choices"][0]["finish_reason"] == "length"


async def test_the_same_seed_gives_the_same_bytes():
    from llmsim.app import create_app
    from llmsim.settings import Settings

    async def answer():
        app = create_app(Settings(profile="instant", seed=7, generator="random"))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as http:
            body = {"model": MODEL, "prompt": ["a", "b"], "n": 2, "max_tokens": 8}
            return (await http.post("/v1/completions", json=body)).content
    assert await answer() == await answer()
