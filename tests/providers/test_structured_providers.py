"""Structured outputs on Anthropic's and Google's side, through their SDKs against a server
with simulated latency: Anthropic `output_config.format` (the SDK's `messages.parse`, also
streamed), `output_config.effort` and the beta's top-level `output_format`; Gemini
`responseMimeType: application/json` with `responseSchema` (google-genai's `response_schema`
from a pydantic model) or `responseJsonSchema`. Each answer is a valid instance of the schema."""
from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import pydantic
import pytest
from google import genai
from google.genai import types

from anthropic_schemas import check_body

HELLO = [{"role": "user", "content": "Who is coming?"}]


class Person(pydantic.BaseModel):
    name: str
    age: int = pydantic.Field(ge=0, le=120)
    email: str | None = None
    tags: list[str] = []


class Party(pydantic.BaseModel):
    host: Person
    guests: list[Person]
    theme: str


@pytest.fixture(scope="module")
def server(live_server_factory):
    return live_server_factory("--profile", "fast")


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)


@pytest.fixture(scope="module")
def gemini(server):
    return genai.Client(api_key="gk-test", http_options=types.HttpOptions(base_url=server.url))


def test_anthropic_messages_parse_answers_an_instance_of_the_model(claude):
    for _ in range(5):
        message = claude.messages.parse(model="claude-sonnet-4-5", max_tokens=4096, messages=HELLO,
                                        output_format=Party)
        assert isinstance(message.parsed_output, Party)
        assert message.stop_reason == "end_turn" and message.content[0].type == "text"


def test_anthropic_structured_output_streams_as_text_deltas(claude):
    schema = Party.model_json_schema()
    with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=4096, messages=HELLO,
                                output_config={"format": {"type": "json_schema", "schema": schema},
                                               "effort": "low"}) as stream:
        text = "".join(stream.text_stream)
    Party.model_validate_json(text)


def test_anthropic_beta_output_format_and_effort_are_accepted(server):
    schema = {"type": "object", "required": ["answer"], "additionalProperties": False,
              "properties": {"answer": {"type": "string"}, "score": {"type": "number", "minimum": 0, "maximum": 1}}}
    for extra in ({"output_format": {"type": "json_schema", "schema": schema}},
                  {"output_config": {"effort": "high", "format": {"type": "json_schema", "schema": schema}}}):
        response = httpx.post(f"{server.url}/v1/messages", timeout=30, json={
            "model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": HELLO, **extra},
            headers={"anthropic-version": "2023-06-01", "anthropic-beta": "structured-outputs-2025-11-13"})
        assert response.status_code == 200, response.text
        check_body("message", response.json())
        jsonschema.validate(json.loads(response.json()["content"][0]["text"]), schema)


def test_anthropic_refuses_an_unknown_format_type(claude):
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=HELLO,
                               output_config={"format": {"type": "xml", "schema": {}}})


def test_gemini_response_schema_from_a_pydantic_model_is_answered(gemini):
    for _ in range(5):
        response = gemini.models.generate_content(
            model="gemini-2.5-flash", contents="Who is coming?",
            config=types.GenerateContentConfig(response_mime_type="application/json", response_schema=Party))
        assert isinstance(response.parsed, Party)


def test_gemini_openapi_subset_schema_with_upper_case_types(gemini):
    schema = types.Schema(type="OBJECT", required=["city", "days"], property_ordering=["city", "days"], properties={
        "city": types.Schema(type="STRING"), "days": types.Schema(type="INTEGER", minimum=1, maximum=7),
        "unit": types.Schema(type="STRING", enum=["C", "F"]), "note": types.Schema(type="STRING", nullable=True),
        "hours": types.Schema(type="ARRAY", items=types.Schema(type="NUMBER"), min_items=1)})
    response = gemini.models.generate_content(
        model="gemini-2.5-flash", contents="weather",
        config=types.GenerateContentConfig(response_mime_type="application/json", response_schema=schema))
    value = json.loads(response.text)
    assert list(value)[:2] == ["city", "days"] and 1 <= value["days"] <= 7
    assert value.get("unit", "C") in ("C", "F") and all(isinstance(h, (int, float)) for h in value["hours"])


def test_gemini_response_json_schema_streams_a_valid_instance(gemini):
    schema = Party.model_json_schema()
    chunks = gemini.models.generate_content_stream(
        model="gemini-2.5-flash", contents="Who is coming?",
        config=types.GenerateContentConfig(response_mime_type="application/json", response_json_schema=schema))
    Party.model_validate_json("".join(chunk.text or "" for chunk in chunks))


def test_gemini_json_without_a_schema_is_json(gemini):
    response = gemini.models.generate_content(
        model="gemini-2.5-flash", contents="anything",
        config=types.GenerateContentConfig(response_mime_type="application/json"))
    assert isinstance(json.loads(response.text), dict)
