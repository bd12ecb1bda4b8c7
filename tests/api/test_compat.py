"""`--compat llmsim|openai`: where the product spec and OpenAI differ (openapi/departures.yaml),
through the openai SDK against live servers: effort rules, usage arithmetic, `summary: null`
or `[]`; and `--usage-semantics`, the old switch for the arithmetic alone, which wins over
what `--compat` implies."""
from __future__ import annotations

import openai
import pytest

import oai_schemas
import sse
from counting import count
from settingsload import load, write_config


@pytest.fixture(scope="module")
def openai_server(live_server_factory):
    return live_server_factory("--profile", "instant", "--compat", "openai")


@pytest.fixture(scope="module")
def openai_client(openai_server):
    return openai_server.client()


def raw_create(client, **params) -> dict:
    return client.responses.with_raw_response.create(input="Think about it", **params).http_response.json()


def reasoning_items(body: dict) -> list[dict]:
    return [item for item in body["output"] if item["type"] == "reasoning"]


# -- the setting ---------------------------------------------------------------------------

def test_compat_defaults_to_the_product_spec():
    s = load()
    assert (s.compat, s.usage) == ("llmsim", "llmsim")


def test_compat_openai_brings_openai_usage_arithmetic():
    assert load(["--compat", "openai"]).usage == "openai"


@pytest.mark.parametrize("argv, environ, usage", [
    (["--compat", "openai", "--usage-semantics", "llmsim"], {}, "llmsim"),
    (["--compat", "llmsim", "--usage-semantics", "openai"], {}, "openai"),
    (["--compat", "openai"], {"LLMSIM_USAGE_SEMANTICS": "llmsim"}, "llmsim"),
    ([], {"LLMSIM_COMPAT": "openai", "LLMSIM_USAGE_SEMANTICS": "llmsim"}, "llmsim"),
], ids=["flags", "flags-reversed", "flag-vs-env", "env"])
def test_an_explicit_usage_semantics_wins_over_compat_from_any_source(argv, environ, usage):
    assert load(argv, environ).usage == usage


def test_usage_semantics_in_the_config_file_wins_over_compat_on_the_command_line(tmp_path):
    path = write_config(tmp_path, {"usage_semantics": "llmsim"})
    s = load(["--config", path, "--compat", "openai"])
    assert (s.compat, s.usage) == ("openai", "llmsim")


def test_compat_from_the_config_file(tmp_path):
    assert load(["--config", write_config(tmp_path, {"compat": "openai"})]).compat == "openai"


def test_a_bad_compat_value_names_what_is_allowed(tmp_path):
    from llmsim.errors import ConfigError
    with pytest.raises(ConfigError, match=r"compat.*llmsim.*openai"):
        load(["--config", write_config(tmp_path, {"compat": "anthropic"})])


# -- effort rules --------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["o3", "o1", "o4-mini", "gpt-5"])
def test_llmsim_accepts_effort_none_for_every_reasoning_model(client, model):
    response = client.responses.create(model=model, input="hi", reasoning={"effort": "none"})
    assert [item.type for item in response.output] == ["message"]
    assert response.usage.output_tokens_details.reasoning_tokens == 0
    assert response.reasoning.effort == "none"


@pytest.mark.parametrize("model", ["o3", "o1", "o4-mini", "gpt-5"])
def test_openai_refuses_effort_none_where_the_model_does(openai_client, model):
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.responses.create(model=model, input="hi", reasoning={"effort": "none"})
    assert caught.value.status_code == 400
    assert f"Unsupported value: 'none' is not supported with the '{model}' model." in caught.value.message
    assert (caught.value.param, caught.value.code) == ("reasoning.effort", "unsupported_value")


def test_llmsim_chat_accepts_reasoning_effort_none(client):
    completion = client.chat.completions.create(model="o3", messages=[{"role": "user", "content": "hi"}],
                                                reasoning_effort="none")
    assert completion.usage.completion_tokens_details.reasoning_tokens == 0


def test_openai_chat_refuses_reasoning_effort_none_for_o3(openai_client):
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.chat.completions.create(model="o3", messages=[{"role": "user", "content": "hi"}],
                                              reasoning_effort="none")
    assert caught.value.param == "reasoning_effort"


@pytest.mark.parametrize("model", ["gpt-5.1", "gpt-5.2"])
def test_llmsim_reasons_at_medium_when_no_effort_is_given(client, model):
    default = client.responses.create(model=model, input="hi")
    medium = client.responses.create(model=model, input="hi", reasoning={"effort": "medium"})
    reasoning = default.usage.output_tokens_details.reasoning_tokens
    assert reasoning > 0
    assert reasoning == medium.usage.output_tokens_details.reasoning_tokens
    assert [item.type for item in default.output] == ["reasoning", "message"]
    assert default.reasoning.effort == "medium"


@pytest.mark.parametrize("model", ["gpt-5.1", "gpt-5.2"])
def test_openai_uses_the_models_own_default_effort(openai_client, model):
    response = openai_client.responses.create(model=model, input="hi")
    assert response.usage.output_tokens_details.reasoning_tokens == 0
    assert [item.type for item in response.output] == ["message"]
    assert response.reasoning.effort == "none"


def test_openai_keeps_medium_for_models_whose_default_it_is(openai_client):
    response = openai_client.responses.create(model="o3", input="hi")
    assert response.reasoning.effort == "medium"
    assert response.usage.output_tokens_details.reasoning_tokens == 3 * count(response.output_text, "o3")


# -- summary: null or [] -------------------------------------------------------------------

def test_llmsim_summary_is_null_when_none_was_requested(client):
    [item] = reasoning_items(raw_create(client, model="o3"))
    assert item["summary"] is None


def test_openai_summary_is_an_empty_list_as_openais_schema_requires(openai_client):
    body = raw_create(openai_client, model="o3")
    [item] = reasoning_items(body)
    assert item["summary"] == []        # (the departure's rule rewrites only null)
    oai_schemas.validate("Response", body)


@pytest.mark.parametrize("compat, summary", [("llmsim", None), ("openai", [])])
def test_summary_in_stream_events_follows_compat(client, openai_client, compat, summary):
    chosen = client if compat == "llmsim" else openai_client
    with chosen.responses.with_streaming_response.create(model="o3", input="hi", stream=True) as raw:
        events = [data for _, data in sse.parse(raw.read().decode())]
    items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    final = [e for e in events if e["type"] == "response.completed"][0]["response"]["output"]
    assert [item["summary"] for item in [*items, *final] if item["type"] == "reasoning"] == [summary, summary]


def test_openai_summary_kept_when_requested(openai_client):
    [item] = reasoning_items(raw_create(openai_client, model="o3", reasoning={"summary": "auto"}))
    assert len(item["summary"]) == 1 and item["summary"][0]["type"] == "summary_text"


# -- usage arithmetic ----------------------------------------------------------------------

def test_llmsim_usage_counts_reasoning_on_top_of_output(client):
    response = client.responses.create(model="o3", input="hi")
    usage = response.usage
    reasoning = usage.output_tokens_details.reasoning_tokens
    assert usage.output_tokens == count(response.output_text, "o3")
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens + reasoning


def test_openai_usage_counts_reasoning_inside_output(openai_client):
    response = openai_client.responses.create(model="o3", input="hi")
    usage = response.usage
    reasoning = usage.output_tokens_details.reasoning_tokens
    assert reasoning > 0
    assert usage.output_tokens == count(response.output_text, "o3") + reasoning
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_openai_chat_usage_counts_reasoning_inside_completion_tokens(openai_client):
    completion = openai_client.chat.completions.create(model="o3", messages=[{"role": "user", "content": "hi"}])
    usage = completion.usage
    reasoning = usage.completion_tokens_details.reasoning_tokens
    assert reasoning > 0
    assert usage.completion_tokens == count(completion.choices[0].message.content, "o3") + reasoning
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_usage_semantics_alias_on_a_live_server_wins_over_compat(live_server_factory):
    """--compat openai --usage-semantics llmsim: OpenAI's effort rules, llmsim's arithmetic."""
    server = live_server_factory("--profile", "instant", "--compat", "openai", "--usage-semantics", "llmsim")
    client = server.client()
    response = client.responses.create(model="o3", input="hi")
    usage = response.usage
    assert usage.output_tokens == count(response.output_text, "o3")
    assert usage.total_tokens == (usage.input_tokens + usage.output_tokens
                                  + usage.output_tokens_details.reasoning_tokens)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="o3", input="hi", reasoning={"effort": "none"})
