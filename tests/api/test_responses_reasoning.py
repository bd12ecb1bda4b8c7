"""Reasoning: effort -> reasoning tokens, summaries, encrypted content, and models that do not
reason. The default target length is 100 visible tokens, so multipliers are easy to read."""
from __future__ import annotations

import re

import openai
import pytest

from our_spec import check_response_body


def create(client, **params):
    raw = client.responses.with_raw_response.create(input="Think about it", **params)
    body = raw.http_response.json()
    check_response_body(body)
    return body


def reasoning_items(body):
    return [item for item in body["output"] if item["type"] == "reasoning"]


@pytest.mark.parametrize("model, effort, reasoning_tokens", [
    ("gpt-5.2", "none", 0),
    ("gpt-5", "minimal", 50),
    ("o3", "low", 150),
    ("o3", "medium", 300),
    ("o3", "high", 600),
    ("gpt-5.2", "xhigh", 1000),
])
def test_effort_multiplies_visible_output_tokens(client, model, effort, reasoning_tokens):
    body = create(client, model=model, reasoning={"effort": effort})
    usage = body["usage"]
    assert usage["output_tokens"] == 100
    assert usage["output_tokens_details"]["reasoning_tokens"] == reasoning_tokens
    assert body["reasoning"]["effort"] == effort


@pytest.mark.parametrize("model, default_tokens", [("o3", 300), ("gpt-5", 300), ("gpt-5.1", 300)])
def test_default_effort_of_the_model_applies(client, model, default_tokens):
    """--compat llmsim (the default): medium for every reasoning model (test_compat.py: openai's)."""
    body = create(client, model=model)
    assert body["usage"]["output_tokens_details"]["reasoning_tokens"] == default_tokens


def test_reasoning_multiplies_the_truncated_length(client):
    body = create(client, model="o3", reasoning={"effort": "high"}, max_output_tokens=10)
    assert body["usage"]["output_tokens_details"]["reasoning_tokens"] == 60


def test_reasoning_item_comes_before_the_message(client):
    body = create(client, model="o3")
    assert [item["type"] for item in body["output"]] == ["reasoning", "message"]
    item = body["output"][0]
    assert re.fullmatch(r"rs_[0-9a-f]+", item["id"])
    assert item["status"] == "completed"


def test_effort_none_produces_no_reasoning_item(client):
    body = create(client, model="gpt-5.2", reasoning={"effort": "none"})
    assert [item["type"] for item in body["output"]] == ["message"]


@pytest.mark.parametrize("model, effort", [("o3", "minimal"), ("o3", "xhigh"), ("gpt-5", "xhigh")])
def test_unsupported_effort_is_rejected_naming_reasoning_effort(client, model, effort):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input="hi", reasoning={"effort": effort})
    assert caught.value.param == "reasoning.effort"
    assert caught.value.status_code == 400
    assert effort in caught.value.message


def test_summary_is_null_unless_requested(client):
    [item] = reasoning_items(create(client, model="o3"))
    assert item["summary"] is None


@pytest.mark.parametrize("kind, fraction", [("auto", 0.10), ("concise", 0.05), ("detailed", 0.15)])
def test_summary_word_count_is_proportional_to_reasoning_tokens(client, kind, fraction):
    body = create(client, model="o3", reasoning={"effort": "medium", "summary": kind})
    [item] = reasoning_items(body)
    [part] = item["summary"]
    assert part["type"] == "summary_text"
    reasoning_tokens = body["usage"]["output_tokens_details"]["reasoning_tokens"]
    assert len(part["text"].split()) == round(fraction * reasoning_tokens)
    assert body["reasoning"]["summary"] == kind


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4.1", "claude-sonnet-4-5"])
def test_non_reasoning_model_accepts_reasoning_and_produces_none(client, model):
    body = create(client, model=model, reasoning={"effort": "high", "summary": "auto"})
    assert reasoning_items(body) == []
    assert body["usage"]["output_tokens_details"]["reasoning_tokens"] == 0


def test_include_encrypted_content_adds_an_opaque_string(client):
    body = create(client, model="o3", include=["reasoning.encrypted_content"])
    [item] = reasoning_items(body)
    assert isinstance(item["encrypted_content"], str) and len(item["encrypted_content"]) > 20


def test_encrypted_content_is_absent_unless_included(client):
    [item] = reasoning_items(create(client, model="o3"))
    assert "encrypted_content" not in item


@pytest.mark.parametrize("reasoning", [{}, {"summary": "auto"}], ids=["summary_null", "summary"])
def test_output_items_with_reasoning_can_be_sent_back_as_input(client, reasoning):
    """An agent loop appends `response.output` (SDK objects) to the next request's input."""
    first = client.responses.create(model="o3", input="hi", reasoning=reasoning,
                                    include=["reasoning.encrypted_content"])
    items = [{"role": "user", "content": "hi"}, *first.output, {"role": "user", "content": "and then?"}]
    assert client.responses.create(model="o3", input=items).status == "completed"
