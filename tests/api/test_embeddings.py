"""POST /v1/embeddings through the openai SDK against a live server: deterministic unit
vectors (equal texts equal, similar texts near), each model's size, `dimensions`, base64,
batches of texts or token arrays, exact usage, errors, faults and stats."""
from __future__ import annotations

import math
import time

import httpx
import openai
import pytest

import oai_schemas
from conftest import LiveServer
from counting import reference
from llmsim.sim import embeddings


@pytest.fixture(scope="module")
def server():
    live = LiveServer("--profile", "instant")
    yield live
    live.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def embed(client, texts, **kwargs):
    kwargs.setdefault("model", "text-embedding-3-small")
    return [d.embedding for d in client.embeddings.create(input=texts, **kwargs).data]


def test_each_vector_has_the_models_size_and_unit_length(client):
    for model, size in [("text-embedding-3-small", 1536), ("text-embedding-3-large", 3072),
                        ("text-embedding-ada-002", 1536)]:
        [vector] = embed(client, "hello world", model=model, encoding_format="float")
        assert len(vector) == size
        assert math.isclose(dot(vector, vector), 1.0, rel_tol=1e-5)


def test_equal_texts_give_equal_vectors_across_requests(client):
    first = embed(client, ["The cat sat on the mat", "other"], encoding_format="float")
    second = embed(client, "The cat sat on the mat", encoding_format="float")
    assert first[0] == second[0]
    assert first[0] != first[1]


def test_similar_texts_are_nearer_than_unrelated_ones(client):
    a, b, c = embed(client, ["The cat sat on the mat", "The cat sat on a mat",
                             "Quarterly revenue grew in every region"], encoding_format="float")
    assert dot(a, b) > 0.5 > 0.2 > dot(a, c)


def test_base64_carries_the_same_float32_vector_as_float(client):
    [floats] = embed(client, "same vector either way", encoding_format="float")
    [decoded] = embed(client, "same vector either way")    # the SDK asks for base64 and decodes it
    assert decoded == floats


def test_base64_is_sent_as_a_string(server):
    body = httpx.post(f"{server.base}/embeddings", json={"model": "text-embedding-3-small",
                                                          "input": "x y", "encoding_format": "base64"}).json()
    assert isinstance(body["data"][0]["embedding"], str)
    assert len(body["data"][0]["embedding"]) == 4 * math.ceil(1536 * 4 / 3)    # 1536 float32s


def test_dimensions_shorten_to_the_normalized_prefix(client):
    [full] = embed(client, "matryoshka vectors", encoding_format="float")
    [short] = embed(client, "matryoshka vectors", encoding_format="float", dimensions=256)
    assert len(short) == 256
    assert math.isclose(dot(short, short), 1.0, rel_tol=1e-5)
    norm = math.sqrt(dot(full[:256], full[:256]))
    assert all(math.isclose(s, f / norm, rel_tol=1e-4, abs_tol=1e-6) for s, f in zip(short, full))


def test_token_arrays_embed_as_their_text_and_usage_is_exact(client):
    enc = reference("cl100k_base")
    texts = ["Embeddings are vectors.", "Naïve café ☕ tokens"]
    as_text = client.embeddings.create(model="text-embedding-3-small", input=texts)
    as_tokens = client.embeddings.create(model="text-embedding-3-small", input=[enc.encode(t) for t in texts])
    assert [d.embedding for d in as_tokens.data] == [d.embedding for d in as_text.data]
    assert [d.index for d in as_text.data] == [0, 1]
    expected = sum(len(enc.encode(t)) for t in texts)
    assert as_text.usage.prompt_tokens == as_text.usage.total_tokens == expected
    single = client.embeddings.create(model="text-embedding-3-small", input=enc.encode(texts[0]))
    assert single.usage.prompt_tokens == len(enc.encode(texts[0])) and len(single.data) == 1


def test_the_body_matches_openais_schema(server):
    body = httpx.post(f"{server.base}/embeddings", json={"model": "text-embedding-3-large",
                                                          "input": ["a", "b"], "encoding_format": "float"}).json()
    oai_schemas.validate("CreateEmbeddingResponse", body)
    assert body["model"] == "text-embedding-3-large"


def test_ada_refuses_dimensions(client):
    with pytest.raises(openai.BadRequestError) as err:
        embed(client, "x", model="text-embedding-ada-002", dimensions=64)
    assert err.value.body["param"] == "dimensions"


def test_more_dimensions_than_the_model_has_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as err:
        embed(client, "x", dimensions=2000)
    assert err.value.body["param"] == "dimensions"


def test_a_chat_model_does_not_embed(client):
    with pytest.raises(openai.BadRequestError) as err:
        embed(client, "x", model="gpt-4o")
    assert err.value.body["param"] == "model"


def test_an_unknown_model_is_a_404(client):
    with pytest.raises(openai.NotFoundError):
        embed(client, "x", model="text-embedding-9")


def test_an_empty_string_is_a_400(client):
    with pytest.raises(openai.BadRequestError):
        embed(client, "")


def test_a_fault_header_gives_its_error(client):
    with pytest.raises(openai.RateLimitError):
        embed(client, "x", extra_headers={"x-llmsim-fault": "rate_limit"})


def test_stats_count_embeddings_requests(server, client):
    def count():
        return httpx.get(f"{server.url}/llmsim/stats").json()["endpoints"].get("embeddings", {}).get("requests", 0)
    before = count()
    embed(client, "counted")
    assert count() == before + 1


def test_a_full_batch_of_long_vectors_is_planned_in_seconds():
    salt = b"text-embedding-3-small\x00"
    texts = [f"document {i} about topic {i % 17} with some shared words" for i in range(2048)]
    began = time.perf_counter()
    vectors = [embeddings.vector(t, salt, 1536, 1536) for t in texts]
    assert time.perf_counter() - began < 30          # generous: the other core may be busy
    assert len(vectors) == 2048 and len(vectors[-1]) == 1536


def test_metrics_count_embeddings_requests(server, client):
    embed(client, "metered")
    text = httpx.get(f"{server.url}/metrics").text
    assert any(line.startswith('llmsim_requests_total{endpoint="embeddings"}') for line in text.splitlines())
