"""`--compat vllm` (docs/vllm.md), through the openai SDK against live servers (tuned and
plain): vLLM's extra sampling parameters accepted, the four that change an answer honoured
(ignore_eos, min_tokens, stop_token_ids, include_stop_str_in_output), per-chunk usage with
stream_options.continuous_usage_stats, /tokenize, /detokenize, /version and vLLM's model
fields. Without the setting the same requests are refused as OpenAI refuses them."""
from __future__ import annotations

import httpx
import openai
import pytest

from settingsload import load

MODEL = "gpt-4o"
HI = [{"role": "user", "content": "Say something"}]
SERVERS = ("tuned", "plain")


@pytest.fixture(scope="module", params=SERVERS)
def vllm_server(request, live_server_factory):
    return live_server_factory("--profile", "instant", "--compat", "vllm", "--server", request.param,
                               "--target-tokens", "20")


@pytest.fixture(scope="module")
def vc(vllm_server):
    return vllm_server.client()


def chat(client, **extra):
    return client.chat.completions.create(model=MODEL, messages=HI, extra_body=extra)


# -- the setting and the default ------------------------------------------------------------

def test_compat_vllm_is_a_setting_and_counts_usage_as_openai():
    s = load(environ={"LLMSIM_COMPAT": "vllm"})
    assert (s.compat, s.usage) == ("vllm", "openai")


def test_by_default_vllm_parameters_are_refused_as_openai_refuses_them(client):
    for extra in ({"ignore_eos": True}, {"min_tokens": 3}, {"stop_token_ids": [13]}, {"top_k": 5}):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=MODEL, messages=HI, max_tokens=5, extra_body=extra)
        name = next(iter(extra))
        assert caught.value.body["param"] == name
        assert "Unrecognized request argument" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="hi", extra_body={"ignore_eos": True})


def test_by_default_vllm_routes_are_not_served(server):
    assert httpx.post(server.url + "/tokenize", json={"prompt": "hi"}).status_code == 404
    assert httpx.get(server.url + "/version").status_code == 404
    model = httpx.get(server.base + "/models").json()["data"][0]
    assert "max_model_len" not in model and "root" not in model


# -- sampling parameters ---------------------------------------------------------------------

def test_every_documented_extra_parameter_is_accepted(vc):
    extras = {"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "length_penalty": 1.0,
              "skip_special_tokens": True, "spaces_between_special_tokens": True, "use_beam_search": False,
              "truncate_prompt_tokens": -1, "allowed_token_ids": None, "bad_words": [],
              "add_generation_prompt": True, "chat_template_kwargs": {"enable_thinking": False},
              "guided_json": None, "priority": 0, "request_id": "r-1", "cache_salt": "s"}
    assert chat(vc, **extras).choices[0].message.content
    assert vc.completions.create(model=MODEL, prompt="hi", extra_body={"top_k": 5, "min_p": 0.1}).choices[0].text


def test_ignore_eos_answers_exactly_max_tokens(vc):
    for cap in (7, 60):                     # shorter and longer than the usual answer (20)
        answer = vc.chat.completions.create(model=MODEL, messages=HI, max_tokens=cap, extra_body={"ignore_eos": True})
        assert answer.usage.completion_tokens == cap
        assert answer.choices[0].finish_reason == "length"
    legacy = vc.completions.create(model=MODEL, prompt="hi", max_tokens=50, extra_body={"ignore_eos": True})
    assert legacy.usage.completion_tokens == 50
    stream = vc.chat.completions.create(model=MODEL, messages=HI, max_tokens=45, stream=True,
                                        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    deltas = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(deltas) == 45 and chunks[-1].usage.completion_tokens == 45


def test_min_tokens_lengthens_a_short_answer_only(vc):
    assert chat(vc).usage.completion_tokens == 20
    longer = chat(vc, min_tokens=33)
    assert longer.usage.completion_tokens == 33 and longer.choices[0].finish_reason == "stop"
    assert chat(vc, min_tokens=5).usage.completion_tokens == 20
    with pytest.raises(openai.BadRequestError) as caught:      # more than max_tokens (else the model's limit)
        vc.chat.completions.create(model=MODEL, messages=HI, max_tokens=10, extra_body={"min_tokens": 11})
    assert caught.value.body["param"] == "min_tokens"
    with pytest.raises(openai.BadRequestError):
        chat(vc, min_tokens=10 ** 12)


def tokenized(server, text: str) -> list[int]:
    return httpx.post(server.url + "/tokenize", json={"model": MODEL, "prompt": text}).json()["tokens"]


def test_stop_token_ids_end_the_answer_before_that_token(vc, vllm_server):
    full = chat(vc).choices[0].message.content
    ids = tokenized(vllm_server, full)
    stop = ids[5]
    first = ids.index(stop)
    cut = chat(vc, stop_token_ids=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert tokenized(vllm_server, cut.choices[0].message.content) == ids[:first]
    kept = chat(vc, stop_token_ids=[stop], include_stop_str_in_output=True)
    assert tokenized(vllm_server, kept.choices[0].message.content) == ids[:first + 1]
    # no stop before min_tokens: the first occurrence at or after it ends the answer
    late = chat(vc, stop_token_ids=[ids[0]], min_tokens=3)
    assert late.choices[0].message.content.startswith(full[:10])


def test_include_stop_str_in_output_keeps_the_stop_string(vc):
    full = chat(vc).choices[0].message.content
    word = full.split()[3]
    plain = vc.chat.completions.create(model=MODEL, messages=HI, stop=[word])
    kept = vc.chat.completions.create(model=MODEL, messages=HI, stop=[word],
                                      extra_body={"include_stop_str_in_output": True})
    assert not plain.choices[0].message.content.endswith(word)
    assert kept.choices[0].message.content == plain.choices[0].message.content + word


def test_continuous_usage_stats_reports_the_usage_in_every_chunk(vc):
    stream = vc.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=6, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True})
    chunks = list(stream)
    assert all(c.usage is not None for c in chunks)
    sent = [c.usage.completion_tokens for c in chunks if c.choices and c.choices[0].delta.content]
    assert sent == [1, 2, 3, 4, 5, 6]
    assert {c.usage.prompt_tokens for c in chunks} == {chunks[-1].usage.prompt_tokens}
    assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + 6
    legacy = list(vc.completions.create(model=MODEL, prompt="hi", max_tokens=4, stream=True,
                                        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    assert [c.usage.completion_tokens for c in legacy if c.choices and c.choices[0].text] == [1, 2, 3, 4]
    # without include_usage there is no usage at all, as vLLM
    bare = list(vc.chat.completions.create(model=MODEL, messages=HI, max_tokens=3, stream=True,
                                           stream_options={"continuous_usage_stats": True}))
    assert all(c.usage is None for c in bare)


# -- vLLM's routes and model fields ----------------------------------------------------------

def test_tokenize_counts_as_the_chat_completion_does(vc, vllm_server):
    url = vllm_server.url
    body = httpx.post(url + "/tokenize", json={"model": MODEL, "messages": HI}).json()
    assert body["count"] == len(body["tokens"]) == chat(vc).usage.prompt_tokens
    assert body["max_model_len"] == 128000
    prompt = httpx.post(url + "/tokenize", json={"model": MODEL, "prompt": "Hello world",
                                                 "return_token_strs": True}).json()
    assert prompt["token_strs"] == ["Hello", " world"] and prompt["count"] == 2
    back = httpx.post(url + "/detokenize", json={"model": MODEL, "tokens": prompt["tokens"]}).json()
    assert back == {"prompt": "Hello world"}


def test_tokenize_errors_are_openai_errors(vllm_server):
    url = vllm_server.url
    missing = httpx.post(url + "/tokenize", json={"model": MODEL})
    assert missing.status_code == 400 and missing.json()["error"]["type"] == "invalid_request_error"
    bad = httpx.post(url + "/detokenize", json={"model": MODEL, "tokens": [10 ** 9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    for messages in ([{"role": ""}], [{"role": "tool"}], [{"role": "user", "content": [{"type": "image_url"}]}]):
        bad_message = httpx.post(url + "/tokenize", json={"model": MODEL, "messages": messages})
        assert bad_message.status_code == 400 and bad_message.json()["error"]["param"].startswith("messages[0]")
    unknown = httpx.post(url + "/tokenize", json={"model": "no-such-model", "prompt": "hi"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


def test_version_and_model_fields(vc, vllm_server):
    assert isinstance(httpx.get(vllm_server.url + "/version").json()["version"], str)
    model = next(m for m in vc.models.list().data if m.id == MODEL)
    assert model.model_extra["max_model_len"] == 128000 and model.model_extra["root"] == MODEL
