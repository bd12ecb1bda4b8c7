"""Gemini embeddings through google-genai (`models.embed_content`, which posts
:batchEmbedContents) and :embedContent over HTTP, on a server with simulated latency:
deterministic unit vectors of the model's size, `output_dimensionality`, Google's 404 for a
model that does not embed; and any other `models/{model}:method` is answered in Google's
envelope, under /v1beta and under /v1."""
from __future__ import annotations

import math

import httpx
import pytest
from google import genai
from google.genai import errors, types


@pytest.fixture(scope="module")
def server(live_server_factory):
    return live_server_factory("--profile", "fast")


@pytest.fixture(scope="module")
def client(server):
    return genai.Client(api_key="gk-test", http_options=types.HttpOptions(base_url=server.url))


def norm(values) -> float:
    return math.sqrt(sum(v * v for v in values))


def test_embed_content_gives_one_unit_vector_per_content(client):
    result = client.models.embed_content(model="gemini-embedding-001",
                                         contents=["The cat sat on the mat", "The cat sat on a mat", "Revenue grew"])
    a, b, c = (e.values for e in result.embeddings)
    assert len(a) == 3072 and math.isclose(norm(a), 1.0, rel_tol=1e-5)
    assert sum(x * y for x, y in zip(a, b)) > 0.5 > sum(x * y for x, y in zip(a, c))
    again = client.models.embed_content(model="gemini-embedding-001", contents="The cat sat on the mat")
    assert again.embeddings[0].values == a


def test_output_dimensionality_shortens_to_a_unit_vector(client):
    config = types.EmbedContentConfig(output_dimensionality=256, task_type="RETRIEVAL_DOCUMENT")
    [embedding] = client.models.embed_content(model="text-embedding-004", contents="short", config=config).embeddings
    assert len(embedding.values) == 256 and math.isclose(norm(embedding.values), 1.0, rel_tol=1e-5)


def test_a_generating_model_does_not_embed(client):
    with pytest.raises(errors.ClientError) as caught:
        client.models.embed_content(model="gemini-2.5-flash", contents="x")
    assert caught.value.code == 404 and caught.value.status == "NOT_FOUND"


def test_embed_content_over_http(server):
    response = httpx.post(f"{server.url}/v1beta/models/gemini-embedding-001:embedContent", timeout=30,
                          json={"content": {"parts": [{"text": "hello"}, {"text": " world"}]},
                                "output_dimensionality": 8})
    assert response.status_code == 200
    assert len(response.json()["embedding"]["values"]) == 8


@pytest.mark.parametrize("base", ["/v1beta", "/v1"])
def test_an_unknown_gemini_route_answers_in_googles_envelope(server, base):
    response = httpx.post(f"{server.url}{base}/models/gemini-2.5-flash:predict", json={}, timeout=30)
    assert response.status_code == 404
    assert response.json()["error"]["status"] == "NOT_FOUND" and response.json()["error"]["code"] == 404
