"""Structured outputs through the official SDK against the shared live server: Responses
`text.format` and Chat `response_format` (json_schema, json_object) give JSON that fits the
schema, in bodies and streams; `responses.parse` / `chat.completions.parse` with Pydantic
models; a token cap that cuts the JSON makes the answer incomplete. Every body and event is
checked against OpenAI's schema (and ours)."""
from __future__ import annotations

import enum
import json

import httpx
import jsonschema
import openai
import pydantic
import pytest

import oai_schemas
import sse
from our_spec import check_events, check_exchange, check_response_body

ASK = "Describe a person."


class Color(enum.StrEnum):
    red = "red"
    green = "green"
    blue = "blue"


class Address(pydantic.BaseModel):
    street: str
    city: str
    postcode: str = pydantic.Field(min_length=5, max_length=5)


class Person(pydantic.BaseModel):
    name: str
    age: int = pydantic.Field(ge=0, le=120)
    favourite: Color
    addresses: list[Address]
    nickname: str | None


# A hand-written schema with every feature the generator must honour.
SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "email": {"type": "string", "format": "email"},
        "born": {"type": "string", "format": "date"},
        "seen": {"type": "string", "format": "date-time"},
        "home": {"type": "string", "format": "uri"},
        "code": {"type": "string", "minLength": 3, "maxLength": 4},
        "score": {"type": "number", "minimum": 0.5, "maximum": 0.75},
        "count": {"type": "integer", "minimum": 10, "maximum": 12},
        "status": {"enum": ["open", "closed"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3},
        "owner": {"anyOf": [{"$ref": "#/$defs/user"}, {"type": "null"}]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
        "rows": {"type": "array", "items": {"$ref": "#/$defs/user"}, "minItems": 1},
    },
    "required": ["id", "email", "born", "seen", "home", "code", "score", "count", "status",
                 "tags", "owner", "either", "rows"],
    "additionalProperties": False,
    "$defs": {"user": {"type": "object", "additionalProperties": False, "required": ["name", "level"],
                       "properties": {"name": {"type": "string"},
                                      "level": {"type": "integer", "minimum": 1, "maximum": 3}}}},
}
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def fits(text: str, schema: dict) -> dict:
    """`text` parses as JSON and validates against `schema` (formats too); returns the value."""
    value = json.loads(text)
    jsonschema.Draft202012Validator(schema, format_checker=FORMATS).validate(value)
    return value


def responses_format(schema: dict = SCHEMA) -> dict:
    return {"format": {"type": "json_schema", "name": "record", "schema": schema, "strict": True}}


def chat_format(schema: dict = SCHEMA) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "record", "schema": schema, "strict": True}}


# ---- the SDK's parse helpers ---------------------------------------------------------------
def test_responses_parse_gives_the_pydantic_model(client):
    response = client.responses.parse(model="gpt-4o", input=ASK, text_format=Person)
    person = response.output_parsed
    assert isinstance(person, Person) and person.addresses
    assert isinstance(person.favourite, Color) and 0 <= person.age <= 120
    assert all(len(a.postcode) == 5 for a in person.addresses)


def test_chat_parse_gives_the_pydantic_model(client):
    completion = client.chat.completions.parse(
        model="gpt-4o", messages=[{"role": "user", "content": ASK}], response_format=Person)
    person = completion.choices[0].message.parsed
    assert isinstance(person, Person) and person.addresses
    assert isinstance(person.favourite, Color)


async def test_an_agent_with_an_output_type_gets_its_model(server):
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
    set_tracing_disabled(True)
    model = OpenAIResponsesModel("gpt-4o", server.async_client())
    result = await Runner.run(Agent(name="people", model=model, output_type=Person), ASK)
    assert isinstance(result.final_output, Person) and isinstance(result.final_output.favourite, Color)


# ---- json_schema: bodies and streams -------------------------------------------------------
def test_responses_text_fits_the_schema(server):
    raw = httpx.post(f"{server.base}/responses", timeout=30,
                     json={"model": "gpt-4o", "input": ASK, "text": responses_format()})
    check_exchange(raw)
    body = raw.json()
    check_response_body(body)
    assert body["status"] == "completed"
    fits(body["output"][0]["content"][0]["text"], SCHEMA)
    assert body["text"]["format"]["schema"] == SCHEMA      # the format is echoed


def test_chat_content_fits_the_schema(server):
    raw = httpx.post(f"{server.base}/chat/completions", timeout=30, json={
        "model": "gpt-4o", "messages": [{"role": "user", "content": ASK}], "response_format": chat_format()})
    check_exchange(raw)
    oai_schemas.validate_chat_completion(raw.json())
    choice = raw.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    fits(choice["message"]["content"], SCHEMA)


def test_chat_n_choices_each_fit_the_schema(client):
    completion = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": ASK}], response_format=chat_format(), n=3)
    assert len(completion.choices) == 3
    for choice in completion.choices:
        fits(choice.message.content, SCHEMA)


def test_responses_stream_deltas_concatenate_to_the_json(server):
    body = {"model": "gpt-4o", "input": ASK, "text": responses_format(), "stream": True}
    raw = httpx.post(f"{server.base}/responses", json=body, timeout=30)
    events = sse.parse(raw.text)
    check_events(events)
    deltas = [e["delta"] for _, e in events if e["type"] == "response.output_text.delta"]
    [done] = [e for _, e in events if e["type"] == "response.output_text.done"]
    assert len(deltas) > 10 and "".join(deltas) == done["text"]
    fits(done["text"], SCHEMA)


def test_chat_stream_deltas_concatenate_to_the_json(client):
    with client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": ASK}],
                                        response_format=chat_format(), stream=True) as stream:
        chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    fits(text, SCHEMA)


def test_json_object_gives_a_json_object(client):
    response = client.responses.create(model="gpt-4o", input="Answer in JSON.",
                                       text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(response.output_text), dict)
    completion = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Answer in JSON."}],
        response_format={"type": "json_object"})
    assert isinstance(json.loads(completion.choices[0].message.content), dict)


def test_plain_text_format_still_gives_the_generators_text(client):
    response = client.responses.create(model="gpt-4o", input=ASK, text={"format": {"type": "text"}})
    assert response.output_text.startswith("Lorem ipsum")


# ---- a token cap cuts the JSON -------------------------------------------------------------
def test_responses_cut_by_max_output_tokens_is_incomplete(server):
    raw = httpx.post(f"{server.base}/responses", timeout=30, json={
        "model": "gpt-4o", "input": ASK, "text": responses_format(), "max_output_tokens": 16})
    body = raw.json()
    check_response_body(body)
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["usage"]["output_tokens"] == 16
    with pytest.raises(json.JSONDecodeError):
        json.loads(body["output"][0]["content"][0]["text"])


def test_chat_cut_by_max_completion_tokens_finishes_with_length(client):
    with pytest.raises(openai.LengthFinishReasonError):
        client.chat.completions.parse(model="gpt-4o", messages=[{"role": "user", "content": ASK}],
                                      response_format=Person, max_completion_tokens=8)


# ---- --seed fixes the value ----------------------------------------------------------------
async def test_the_same_seed_gives_the_same_json(app_client):
    """Two servers with one seed answer the same requests alike; one server's successive
    answers differ (the value is drawn, not fixed)."""
    runs = []
    for _ in range(2):
        async with app_client(seed=11) as http:
            runs.append([(await http.post("/v1/responses", json={"model": "gpt-4o", "input": ASK,
                                                                 "text": responses_format()})
                          ).json()["output"][0]["content"][0]["text"] for _ in range(2)])
    fits(runs[0][0], SCHEMA)
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]
