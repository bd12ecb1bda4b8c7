"""Model names as applications pin them: dated snapshots, versions, `-latest` and aliases answer
for their catalogue model (data/models.yaml `snapshots`, `aliases`), and each answer echoes
the name as sent, through each provider's SDK on a server with simulated latency. A name of
no catalogue family stays 404 model_not_found."""
from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import errors, types


@pytest.fixture(scope="module")
def server(live_server_factory):
    return live_server_factory("--profile", "fast", "--target-tokens", "5")


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)


@pytest.fixture(scope="module")
def gemini(server):
    return genai.Client(api_key="gk-test", http_options=types.HttpOptions(base_url=server.url))


@pytest.mark.parametrize("name", ["gpt-4o-2024-08-06", "gpt-4o-mini-2024-07-18", "gpt-3.5-turbo-0125",
                                  "chatgpt-4o-latest", "gpt-5-2025-08-07"])
def test_openai_snapshots_answer_under_the_name_sent(client, name):
    chat = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}])
    assert chat.model == name and chat.choices[0].message.content
    assert client.responses.create(model=name, input="hi").model == name
    assert client.models.retrieve(name).id == name


def test_an_embedding_snapshot_keeps_its_models_size(client):
    data = client.embeddings.create(model="text-embedding-3-large", input="x", encoding_format="float")
    assert len(data.data[0].embedding) == 3072


@pytest.mark.parametrize("name", ["claude-sonnet-4-5-20250929", "claude-3-5-sonnet-latest",
                                  "claude-3-7-sonnet-20250219", "claude-sonnet-4-0", "claude-haiku-4-5-20251001"])
def test_anthropic_snapshots_and_aliases_answer_under_the_name_sent(claude, name):
    message = claude.messages.create(model=name, max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    assert message.model == name and message.content[0].text


@pytest.mark.parametrize("name", ["gemini-2.0-flash-001", "gemini-2.5-flash-lite",
                                  "gemini-2.5-flash-preview-05-20", "gemini-flash-latest"])
def test_gemini_versions_and_aliases_answer_under_the_name_sent(gemini, name):
    response = gemini.models.generate_content(model=name, contents="hi")
    assert response.model_version == name and response.text


def test_a_name_of_no_catalogue_family_is_still_not_found(client, claude, gemini):
    for name in ("llama-3-8b", "gpt-4o-foo", "claude-3-5-sonnet-v9"):
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}])
        assert caught.value.body["code"] == "model_not_found"
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-9-20990101", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(errors.ClientError) as caught:
        gemini.models.generate_content(model="gemini-9.9-ultra-001", contents="hi")
    assert caught.value.code == 404


def test_the_listing_names_the_catalogue_only(server):
    ids = {m["id"] for m in httpx.get(f"{server.base}/models").json()["data"]}
    assert "gpt-4o" in ids and "gpt-4o-2024-08-06" not in ids


@pytest.fixture(scope="module")
def client(server):
    return server.client()
