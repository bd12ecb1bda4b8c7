"""Logprobs through the official SDK against live servers: Chat `logprobs: true` with
`top_logprobs`, and Responses `include: ["message.output_text.logprobs"]`, in JSON bodies and
streams. Every body and event is checked against OpenAI's schema (and ours)."""
from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from websockets.asyncio.client import connect

import oai_schemas
import sse
from our_spec import check_error, check_events, check_exchange, check_response_body

HELLO = [{"role": "user", "content": "Say hello"}]
INCLUDE = ["message.output_text.logprobs"]


def check_entries(entries, text: str, k: int, with_bytes: bool = True) -> None:
    """Logprob entries (SDK objects): one per token, concatenating to `text`; each with a
    logprob <= 0 and k alternatives, most likely first."""
    assert entries and "".join(e.token for e in entries) == text
    for entry in entries:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == k
        values = [top.logprob for top in entry.top_logprobs]
        assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
        assert len({top.token for top in entry.top_logprobs}) == k
        if with_bytes:
            assert entry.bytes == list(entry.token.encode())
            assert all(top.bytes == list(top.token.encode()) for top in entry.top_logprobs)


def chat(client, **params):
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=HELLO, logprobs=True, **params)
    check_exchange(raw.http_response)
    oai_schemas.validate_chat_completion(raw.http_response.json())
    return raw.parse()


def chat_stream(server, **params) -> list:
    """Streamed chunks (SDK objects), each raw chunk checked against OpenAI's schema first."""
    body = {"model": "gpt-4o", "messages": HELLO, "stream": True, "logprobs": True, **params}
    raw = httpx.post(f"{server.base}/chat/completions", json=body, timeout=30)
    assert raw.status_code == 200
    events = sse.parse(raw.text)
    assert events[-1][1] == "[DONE]"
    for _, chunk in events[:-1]:
        oai_schemas.validate_chat_chunk(chunk)
    with server.client().chat.completions.create(**body) as stream:
        return list(stream)


def responses_stream(server, **params) -> list:
    body = {"model": "gpt-4o", "input": "Say hello", "stream": True, "include": INCLUDE, **params}
    raw = httpx.post(f"{server.base}/responses", json=body, timeout=30)
    assert raw.status_code == 200
    check_events(sse.parse(raw.text))
    with server.client().responses.create(**body) as stream:
        return list(stream)


# ---- Chat Completions ---------------------------------------------------------------------
def test_chat_body_has_one_entry_per_token_concatenating_to_the_content(client):
    completion = chat(client, top_logprobs=3)
    choice = completion.choices[0]
    check_entries(choice.logprobs.content, choice.message.content, 3)
    assert len(choice.logprobs.content) == completion.usage.completion_tokens
    assert choice.logprobs.refusal is None


def test_chat_without_top_logprobs_gives_entries_with_no_alternatives(client):
    choice = chat(client).choices[0]
    check_entries(choice.logprobs.content, choice.message.content, 0)


def test_chat_chosen_token_is_the_most_likely_at_temperature_one(client):
    choice = chat(client, top_logprobs=5, temperature=1.0).choices[0]
    for entry in choice.logprobs.content:
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == entry.logprob


def test_chat_at_a_high_temperature_some_chosen_tokens_are_not_the_most_likely(server):
    client = server.client()
    entries = [e for _ in range(3)
               for e in chat(client, top_logprobs=5, temperature=2.0).choices[0].logprobs.content]
    below = [e for e in entries if e.logprob < e.top_logprobs[0].logprob]
    assert below and len(below) < len(entries)
    # a sampled token below the top is still one of the likely ones, at its own logprob
    assert all((e.token, e.logprob) in [(t.token, t.logprob) for t in e.top_logprobs] for e in below)


def test_chat_n_choices_each_carry_their_own_logprobs(client):
    completion = chat(client, top_logprobs=1, n=2)
    for choice in completion.choices:
        check_entries(choice.logprobs.content, choice.message.content, 1)


@pytest.mark.parametrize("n", [1, 2])
def test_chat_stream_chunks_carry_their_tokens_entry(server, n):
    chunks = chat_stream(server, top_logprobs=3, n=n)
    for index in range(n):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == index]
        content = [c for c in mine if c.delta.content]
        assert content
        for choice in content:
            [entry] = choice.logprobs.content
            assert entry.token == choice.delta.content
        text = "".join(c.delta.content for c in content)
        check_entries([c.logprobs.content[0] for c in content], text, 3)


@pytest.mark.parametrize("value", [21, -1])
def test_chat_top_logprobs_out_of_range_is_a_400_naming_it(client, server, value):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-4o", messages=HELLO, logprobs=True, top_logprobs=value)
    assert info.value.status_code == 400 and info.value.param == "top_logprobs"
    raw = httpx.post(f"{server.base}/chat/completions",
                     json={"model": "gpt-4o", "messages": HELLO, "logprobs": True, "top_logprobs": value})
    assert check_error(raw, 400)["param"] == "top_logprobs"


def test_chat_cut_by_a_content_filter_keeps_the_logprobs_of_the_text_it_kept(client):
    completion = chat(client, top_logprobs=1,
                      extra_headers={"x-llmsim-fault": "content_filter;after_tokens=3"})
    choice = completion.choices[0]
    assert choice.finish_reason == "content_filter"
    assert len(choice.logprobs.content) == 3
    check_entries(choice.logprobs.content, choice.message.content, 1)


# ---- Responses ----------------------------------------------------------------------------
def test_responses_output_text_part_carries_logprobs(client):
    raw = client.responses.with_raw_response.create(model="gpt-4o", input="Say hello", include=INCLUDE,
                                                    top_logprobs=2)
    check_exchange(raw.http_response)
    check_response_body(raw.http_response.json())
    response = raw.parse()
    [part] = response.output[0].content
    check_entries(part.logprobs, part.text, 2)
    assert len(part.logprobs) == response.usage.output_tokens


def test_responses_cut_by_a_content_filter_keeps_the_logprobs_of_the_text_it_kept(client):
    response = client.responses.create(model="gpt-4o", input="Say hello", include=INCLUDE,
                                       extra_headers={"x-llmsim-fault": "content_filter;after_tokens=4"})
    assert response.incomplete_details.reason == "content_filter"
    [part] = response.output[0].content
    assert len(part.logprobs) == 4
    check_entries(part.logprobs, part.text, 0)


def test_responses_without_the_include_carry_empty_logprobs(client):
    response = client.responses.create(model="gpt-4o", input="Say hello", top_logprobs=2)
    assert response.output[0].content[0].logprobs == []


def test_responses_stream_deltas_and_done_carry_logprobs(server):
    events = responses_stream(server, top_logprobs=3)
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert deltas
    for event in deltas:
        [entry] = event.logprobs
        assert entry.token == event.delta
    [done] = [e for e in events if e.type == "response.output_text.done"]
    check_entries([d.logprobs[0] for d in deltas], done.text, 3, with_bytes=False)
    check_entries(done.logprobs, done.text, 3, with_bytes=False)
    [part_done] = [e for e in events if e.type == "response.content_part.done"]
    check_entries(part_done.part.logprobs, done.text, 3)
    final = events[-1].response.output[0].content[0]
    assert [e.model_dump() for e in final.logprobs] == [e.model_dump() for e in part_done.part.logprobs]


async def test_responses_over_a_websocket_deltas_carry_logprobs(server):
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    events = []
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "gpt-4o", "input": "hi",
                                  "include": INCLUDE, "top_logprobs": 2}))
        while not events or events[-1]["type"] != "response.completed":
            events.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            oai_schemas.validate_response_event(events[-1])
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all([entry["token"] for entry in e["logprobs"]] == [e["delta"]] for e in deltas)
    assert all(len(e["logprobs"][0]["top_logprobs"]) == 2 for e in deltas)


@pytest.mark.parametrize("value", [21, -1])
def test_responses_top_logprobs_out_of_range_is_a_400_naming_it(client, server, value):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-4o", input="hi", include=INCLUDE, top_logprobs=value)
    assert info.value.status_code == 400 and info.value.param == "top_logprobs"
    raw = httpx.post(f"{server.base}/responses",
                     json={"model": "gpt-4o", "input": "hi", "include": INCLUDE, "top_logprobs": value})
    assert check_error(raw, 400)["param"] == "top_logprobs"


# ---- both: fixed by --seed ----------------------------------------------------------------
def logprob_values(server) -> list:
    """The logprobs of a Chat body, a Chat stream, a Responses body and a Responses stream."""
    client = server.client()
    chat_body = chat(client, top_logprobs=3).choices[0].logprobs.content
    streamed = [c.choices[0].logprobs.content[0] for c in chat_stream(server, top_logprobs=3)
                if c.choices and c.choices[0].delta.content]
    response = client.responses.create(model="gpt-4o", input="hi", include=INCLUDE, top_logprobs=3)
    deltas = [e.logprobs[0] for e in responses_stream(server, top_logprobs=3)
              if e.type == "response.output_text.delta"]
    return [[e.model_dump() for e in entries]
            for entries in (chat_body, streamed, response.output[0].content[0].logprobs, deltas)]


@pytest.fixture(scope="module")
def seeded(live_server_factory) -> dict[str, list]:
    flags = ("--profile", "instant", "--generator", "random", "--target-tokens", "12")
    return {name: logprob_values(live_server_factory(*flags, "--seed", seed))
            for name, seed in (("a", "1234"), ("b", "1234"), ("other", "99"))}


def test_same_seed_gives_the_same_logprobs(seeded):
    assert seeded["a"] == seeded["b"]


def test_another_seed_gives_other_logprobs(seeded):
    assert all(x != y for x, y in zip(seeded["a"], seeded["other"]))
