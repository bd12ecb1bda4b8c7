"""Usage: exact tiktoken counts (computed independently in counting.py) and the two
arithmetic conventions for reasoning tokens."""
from __future__ import annotations

import pytest

from counting import conversation, count, message
from llmsim.sim.responses_plan import Usage

MIXED = "Die Größe des Universums ist unermesslich — 宇宙の大きさは計り知れない。"


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4"])
def test_input_tokens_use_the_models_encoding(client, model):
    """o200k_base for current models, cl100k_base for gpt-4 (the text counts differently in each)."""
    response = client.responses.create(model=model, input=MIXED)
    assert response.usage.input_tokens == conversation(message("user", MIXED, model=model))


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4"])
def test_output_tokens_are_the_exact_count_of_the_text_sent(client, model):
    response = client.responses.create(model=model, input="hi")
    assert response.usage.output_tokens == count(response.output_text, model)


def test_usage_counts_are_the_same_streamed_and_not(client):
    plain = client.responses.create(model="gpt-4o", input=MIXED, instructions="Be brief.")
    with client.responses.stream(model="gpt-4o", input=MIXED, instructions="Be brief.") as stream:
        streamed = stream.get_final_response()
    assert streamed.usage == plain.usage


def test_total_is_input_plus_output_plus_reasoning(client):
    response = client.responses.create(model="o3", input="hi")
    usage = response.usage
    assert usage.output_tokens_details.reasoning_tokens > 0
    assert usage.output_tokens == count(response.output_text, "o3")
    assert usage.total_tokens == (usage.input_tokens + usage.output_tokens
                                  + usage.output_tokens_details.reasoning_tokens)


def test_total_without_reasoning_is_input_plus_output(client):
    usage = client.responses.create(model="gpt-4o", input="hi").usage
    assert usage.output_tokens_details.reasoning_tokens == 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_cached_tokens_are_zero(client):
    usage = client.responses.create(model="gpt-4o", input="hi").usage
    assert usage.input_tokens_details.cached_tokens == 0


async def test_openai_usage_semantics_count_reasoning_inside_output(app_client):
    async with app_client(usage_semantics="openai") as http:
        body = (await http.post("/v1/responses", json={"model": "o3", "input": "hi"})).json()
    usage = body["usage"]
    visible = count(body["output_text"], "o3")
    reasoning = usage["output_tokens_details"]["reasoning_tokens"]
    assert reasoning == 3 * visible
    assert usage["output_tokens"] == visible + reasoning
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


@pytest.mark.parametrize("semantics, output, total", [("llmsim", 50, 300), ("openai", 200, 300)])
def test_usage_arithmetic_example(semantics, output, total):
    """The spec's example: 100 in, 50 visible out, 150 reasoning."""
    usage = Usage.make(100, 50, 150, semantics)
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens, usage.total_tokens) == \
        (100, output, 150, total)
