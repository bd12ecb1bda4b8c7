"""POST /v1/responses/compact through the openai SDK against a live server: a conversation
becomes its user messages and one compaction item, which a following responses.create
accepts as input (counting the compaction's summary, not what it compacted)."""
from __future__ import annotations

import httpx
import openai
import pytest

import oai_schemas
from conftest import LiveServer

MODEL = "gpt-4o"


@pytest.fixture(scope="module")
def server():
    live = LiveServer("--profile", "instant", "--target-tokens", "300")
    yield live
    live.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def conversation(client):
    first = client.responses.create(model=MODEL, input="Write a long essay about lighthouses")
    return [{"role": "user", "content": "Write a long essay about lighthouses"},
            *[item.model_dump(exclude_none=True) for item in first.output],
            {"role": "user", "content": "Now shorten it"}]


def test_compact_keeps_the_user_messages_and_adds_one_compaction_item(client):
    compacted = client.responses.compact(model=MODEL, input=conversation(client))
    assert compacted.object == "response.compaction"
    kinds = [(item.type, getattr(item, "role", None)) for item in compacted.output]
    assert kinds == [("message", "user"), ("message", "user"), ("compaction", None)]
    item = compacted.output[-1]
    assert item.id.startswith("cmp_") and item.encrypted_content
    assert compacted.usage.total_tokens == compacted.usage.input_tokens + compacted.usage.output_tokens


def test_a_following_request_accepts_the_compacted_output_and_reads_less(client):
    history = conversation(client)
    whole = client.responses.input_tokens.count(model=MODEL, input=history).input_tokens
    compacted = client.responses.compact(model=MODEL, input=history)
    follow = client.responses.create(model=MODEL, input=[*[i.model_dump(exclude_none=True) for i in compacted.output],
                                                         {"role": "user", "content": "Thanks"}])
    assert follow.status == "completed"
    assert 0 < follow.usage.input_tokens < whole


def test_the_compaction_counts_what_it_carries(client):
    compacted = client.responses.compact(model=MODEL, input=conversation(client))
    item = compacted.output[-1].model_dump(exclude_none=True)
    with_item = client.responses.input_tokens.count(model=MODEL, input=[item]).input_tokens
    empty = client.responses.input_tokens.count(
        model=MODEL, input=[{**item, "encrypted_content": "not sealed by llmsim"}]).input_tokens
    assert with_item - empty == compacted.usage.output_tokens


def test_compact_continues_a_previous_response(client):
    first = client.responses.create(model=MODEL, input="Tell me about tides")
    compacted = client.responses.compact(model=MODEL, previous_response_id=first.id)
    assert [item.type for item in compacted.output] == ["message", "compaction"]
    assert compacted.output[0].content[0].text == "Tell me about tides"


def test_the_body_matches_openais_schema(server):
    body = httpx.post(f"{server.base}/responses/compact",
                      json={"model": MODEL, "input": "hello", "instructions": "be brief"}).json()
    oai_schemas.validate("CompactResource", body)


def test_an_unknown_previous_response_is_a_400_as_for_create(client):
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.compact(model=MODEL, previous_response_id="resp_missing")
    assert exc.value.code == "previous_response_not_found"


def test_an_unknown_model_is_a_404(client):
    with pytest.raises(openai.NotFoundError):
        client.responses.compact(model="no-such-model", input="x")


def test_a_fault_header_gives_its_error(client):
    with pytest.raises(openai.RateLimitError):
        client.responses.compact(model=MODEL, input="x", extra_headers={"x-llmsim-fault": "rate_limit"})
