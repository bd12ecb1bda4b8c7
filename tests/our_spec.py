"""Check what llmsim sends against OUR OpenAPI document (openapi/openapi.yaml), and OpenAI's.

`check_exchange(response)` validates a whole HTTP exchange (route, status, content type,
JSON body) with openapi-core; `validate(schema_name, obj)` checks one component schema
(e.g. the `response` object inside an SSE event). `check_response_body`, `check_events`
and `check_error` run both our document and OpenAI's (tests/oai_schemas.py) in one call.
"""
from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import httpx
import yaml
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from openapi_schema_validator import OAS30Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

import oai_schemas

SPEC_PATH = Path(__file__).resolve().parents[1] / "openapi" / "openapi.yaml"
_URI = "urn:llmsim:openapi"
# Stream events whose `response` is a full response object.
RESPONSE_EVENTS = {"response.created", "response.in_progress", "response.completed",
                   "response.incomplete", "response.failed", "response.queued"}


@cache
def document() -> dict:
    return yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))


@cache
def _api() -> OpenAPI:
    return OpenAPI.from_dict(document())


@cache
def _validator(schema_name: str) -> OAS30Validator:
    registry = Registry().with_resource(_URI, Resource.from_contents(document(), DRAFT4))
    return OAS30Validator({"$ref": f"{_URI}#/components/schemas/{schema_name}"}, registry=registry)


def validate(schema_name: str, instance: Any) -> None:
    """Assert `instance` matches `#/components/schemas/<schema_name>` of our document."""
    errors = sorted(_validator(schema_name).iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        lines = [f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}"
                 for e in errors[:5]]
        raise AssertionError(f"not a valid {schema_name} (our openapi.yaml):\n" + "\n".join(lines))


def check_exchange(response: httpx.Response) -> None:
    """Validate a response (status, content type, body) against the operation in our document."""
    request = response.request
    url = request.url
    mock_request = MockRequest(f"{url.scheme}://{url.netloc.decode()}", request.method.lower(), url.path,
                               data=request.content,
                               content_type=request.headers.get("content-type", "application/json"))
    content_type = response.headers.get("content-type", "").split(";")[0]
    if content_type == "text/event-stream":
        _check_stream(request.method.lower(), url.path, response)
        return
    mock_response = MockResponse(response.content, status_code=response.status_code,
                                 content_type=content_type)
    try:
        _api().validate_response(mock_request, mock_response)
    except Exception as exc:  # openapi-core's errors embed the whole body: keep the gist
        cause = exc.__cause__ or exc
        detail = "; ".join(str(e.message)[:300] for e in getattr(cause, "schema_errors", ())) or str(cause)[:600]
        raise AssertionError(f"{request.method} {url.path} -> {response.status_code} {content_type} "
                             f"does not match our openapi.yaml: {type(cause).__name__}: {detail}") from None


def _check_stream(method: str, path: str, response: httpx.Response) -> None:
    """An SSE body: each event ({event, data} as sent) against the media type's schema, which
    OpenAPI 3.0 tools read as the schema of one event."""
    for base in ("/openai/v1", "/v1"):
        if path.startswith(base + "/"):
            path = path[len(base):]
            break
    responses = document()["paths"][path][method]["responses"]
    media = (responses.get(str(response.status_code)) or responses["default"])["content"]
    assert "text/event-stream" in media, f"{method.upper()} {path} does not document text/event-stream"
    schema = media["text/event-stream"]["schema"]
    ref = schema.get("$ref", "")
    assert ref.startswith("#/components/schemas/"), f"inline stream schema {schema} (use a component)"
    frames = [frame for frame in response.text.split("\n\n") if frame.strip()]
    for frame in frames:
        event = {}
        for line in frame.split("\n"):
            if line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            event[field] = event[field] + "\n" + value if field == "data" and field in event else value
        if event:
            validate(ref.rsplit("/", 1)[1], event)


def check_response_body(body: dict) -> None:
    """A response object, against our ResponseObject and OpenAI's Response."""
    validate("ResponseObject", body)
    oai_schemas.validate("Response", body)


def check_events(events: list[tuple[str | None, Any]]) -> None:
    """Every SSE event: OpenAI's schema for its type, the SSE name equal to its type, and our
    ResponseObject for the response that created/in_progress/completed events carry."""
    for name, data in events:
        assert isinstance(data, dict), f"event {name} carries {data!r}"
        assert name == data["type"], f"SSE event name {name!r} differs from data.type {data['type']!r}"
        oai_schemas.validate_response_event(data)
        if data["type"] in RESPONSE_EVENTS:
            validate("ResponseObject", data["response"])


def check_error(response: httpx.Response, status: int) -> dict:
    """A provider error envelope with `status`; returns the `error` object."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].split(";")[0] == "application/json"
    body = response.json()
    validate("ErrorEnvelope", body)
    oai_schemas.validate_error_body(body)
    return body["error"]
