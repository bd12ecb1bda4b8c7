"""Bad input never gets a 500, a traceback, problem+json or plain text: always a 4xx JSON error
whose message (and, for body fields, `param`) names what is wrong."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

import oai_schemas

JSON = {"content-type": "application/json"}
OK = {"model": "gpt-4o-mini", "input": "hi"}


def body(**fields) -> bytes:
    return json.dumps({**OK, **fields}).encode()


def nested(depth: int) -> bytes:
    return b'{"model":"gpt-4o-mini","input":' + b"[" * depth + b"]" * depth + b"}"


# (case id, raw body, headers, expected status, text the message must contain, expected param)
CASES = [
    ("invalid-json", b'{"model": "gpt-4o-mini",', JSON, 400, "parse the JSON body", None),
    ("not-utf8", b'{"model": "gpt-4o-\xff\xfe"}', JSON, 400, "UTF-8", None),
    ("lone-surrogate", b'{"model": "gpt-4o-mini", "input": "\\ud800"}', JSON, 400, "JSON", None),
    ("empty-body", b"", JSON, 400, "required", None),
    ("array-body", b"[]", JSON, 400, "body", None),
    ("text-content-type", body(), {"content-type": "text/plain"}, 415, "Content-Type", None),
    ("form-content-type", b"model=x", {"content-type": "application/x-www-form-urlencoded"}, 415,
     "application/json", None),
    ("wrong-type", body(temperature="hot"), JSON, 400, "temperature", "temperature"),
    ("unknown-enum", body(truncation="sometimes"), JSON, 400, "truncation", "truncation"),
    ("temperature-above-2", body(temperature=2.5), JSON, 400, "temperature", "temperature"),
    ("negative-token-cap", body(max_output_tokens=-5), JSON, 400, "max_output_tokens", "max_output_tokens"),
    ("huge-token-cap", body(max_output_tokens=10**12), JSON, 400, "max_output_tokens", "max_output_tokens"),
    ("giant-integer", b'{"model": "gpt-4o-mini", "max_output_tokens": 1' + b"0" * 40 + b"}", JSON, 400,
     "max_output_tokens", "max_output_tokens"),
    ("too-many-metadata-pairs", body(metadata={f"k{i}": "v" for i in range(17)}), JSON, 400,
     "metadata", "metadata"),
    ("long-metadata-value", body(metadata={"k": "v" * 513}), JSON, 400, "metadata.k", "metadata.k"),
    ("unknown-item-type", body(input=[{"type": "telepathy"}]), JSON, 400, "telepathy", "input[0].type"),
    ("unknown-tool-type", body(tools=[{"type": "teleporter"}]), JSON, 400, "teleporter", "tools[0].type"),
    ("unknown-field", body(flavour="vanilla"), JSON, 400, "flavour", "flavour"),
    ("missing-model", json.dumps({"input": "hi"}).encode(), JSON, 400, "model", "model"),
    ("nested-100", nested(100), JSON, 400, "nested", None),
    ("nested-100000", nested(100_000), JSON, 400, "JSON", None),
    ("nan", b'{"model": "gpt-4o-mini", "temperature": NaN}', JSON, 400, "JSON", None),
]


@pytest.mark.parametrize("raw, headers, status, words, param",
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
async def test_malformed_requests_get_a_json_error_naming_the_problem(shared_app_client, raw, headers,
                                                                      status, words, param):
    async with shared_app_client() as client:
        response = await client.post("/v1/responses", content=raw, headers=headers)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error = response.json()
    oai_schemas.validate_error_body(error)
    assert words in error["error"]["message"]
    if param is not None:
        assert error["error"]["param"] == param


async def test_a_body_one_operation_accepted_is_checked_again_by_another(app_client):
    async with app_client() as client:
        accepted = await client.post("/v1/responses", content=body(), headers=JSON)
        refused = await client.post("/v1/chat/completions", content=body(), headers=JSON)
    assert accepted.status_code == 200, accepted.text
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "messages"


async def test_a_refused_body_is_refused_each_time_it_is_sent(app_client):
    async with app_client() as client:
        answers = [await client.post("/v1/responses", content=body(temperature=2.5), headers=JSON)
                   for _ in range(2)]
    assert [a.status_code for a in answers] == [400, 400]
    assert [a.json()["error"]["param"] for a in answers] == ["temperature", "temperature"]


async def test_missing_content_type_is_read_as_json(app_client):
    async with app_client() as client:
        response = await client.post("/v1/responses", content=body(), headers={"content-type": ""})
        bare = await client.post("/v1/responses", content=body())
    assert bare.status_code == 200, bare.text
    assert response.status_code in (200, 415)


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/v1/no-such-route", 404), ("GET", "/nowhere", 404), ("POST", "/openai/v1/engines", 404),
    ("GET", "/v1/responses", 405), ("DELETE", "/v1/models", 405), ("PUT", "/health", 405),
    ("PATCH", "/openai/v1/responses", 405),
])
async def test_unknown_routes_and_methods_get_json_errors(shared_app_client, method, path, status):
    async with shared_app_client() as client:
        response = await client.request(method, path)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    oai_schemas.validate_error_body(response.json())


async def test_declared_oversized_body_is_refused_before_reading(shared_app_client):
    async with shared_app_client(max_body_bytes=1000) as client:
        response = await client.post("/v1/responses", content=body(input="x" * 2000), headers=JSON)
    assert response.status_code == 413
    assert "max_body_bytes" in response.json()["error"]["message"]


async def test_streamed_oversized_body_is_refused(shared_app_client):
    async def chunks():
        yield b'{"model": "gpt-4o-mini", "input": "'
        for _ in range(50):
            yield b"x" * 100
        yield b'"}'
    async with shared_app_client(max_body_bytes=1000) as client:
        response = await client.post("/v1/responses", content=chunks(), headers=JSON)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


async def test_body_under_the_limit_is_served_also_when_chunked(shared_app_client):
    async def chunks():
        yield body()[:10]
        yield body()[10:]
    async with shared_app_client(max_body_bytes=1000) as client:
        assert (await client.post("/v1/responses", content=body(), headers=JSON)).status_code == 200
        assert (await client.post("/v1/responses", content=chunks(), headers=JSON)).status_code == 200


async def test_dropped_streams_leak_nothing(live_server_factory):
    """Open many slow streams, hang up on each after the first bytes; the server stays healthy,
    answers the next request, and (when it keeps stats) has no stream left open."""
    server = live_server_factory("--ttft-ms", "20", "--tbt-ms", "20", "--target-tokens", "400")
    payload = {**OK, "stream": True}

    async def open_and_drop(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", "/v1/responses", json=payload) as response:
            async for _ in response.aiter_bytes():
                break

    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        await asyncio.gather(*(open_and_drop(client) for _ in range(40)))
        assert (await client.get("/health")).status_code == 200
        follow_up = await client.post("/v1/responses", json={**OK, "max_output_tokens": 16})
        assert follow_up.status_code == 200
        for _ in range(50):            # the server notices each hang-up at its next write
            active = (await client.get("/llmsim/stats")).json()["requests"]["active_streams"]
            if active == 0:
                break
            await asyncio.sleep(0.1)
        assert active == 0


def _documented_paths():
    import yaml

    from conftest import REPO
    doc = yaml.safe_load((REPO / "openapi" / "openapi.yaml").read_text())
    return {path: {m.upper() for m in item if m in ("get", "post", "put", "delete", "patch")}
            for path, item in doc["paths"].items()}


@pytest.mark.parametrize("path, documented", sorted(_documented_paths().items()))
async def test_405_allow_header_lists_every_documented_method(shared_app_client, path, documented):
    concrete = "/v1" + path.replace("{", "x").replace("}", "")
    async with shared_app_client() as client:
        response = await client.request("TRACE", concrete)
    assert response.status_code == 405
    allowed = {m.strip() for m in response.headers["allow"].split(",")} - {"HEAD"}
    assert allowed == documented


async def test_an_integer_beyond_64_bits_is_echoed_not_a_500(app_client):
    """JSON allows any integer; orjson stops at 64 bits, so such a value the answer echoes (a
    tool's schema) is written by Python's json instead (llmsim.render.jsoncodegen)."""
    huge = 2 ** 70
    tool = {"type": "function", "name": "f", "parameters": {"type": "object",
                                                           "properties": {"x": {"type": "integer", "maximum": huge}}}}
    async with app_client() as client:
        answer = await client.post("/v1/responses", json={"model": "gpt-4o", "input": "hi", "tools": [tool],
                                                          "tool_choice": "none"})
    assert answer.status_code == 200
    assert answer.json()["tools"][0]["parameters"]["properties"]["x"]["maximum"] == huge
