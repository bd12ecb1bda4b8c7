"""JSON Schemas of Anthropic's Messages API bodies and stream events, written for these tests
from Anthropic's published API reference (docs.claude.com: Messages, Streaming Messages,
Count Message tokens, Models, Errors). Objects are closed (`additionalProperties: false`):
a field Anthropic does not document fails, as a missing one does. What llmsim sends that the
reference does not have is listed in openapi/departures.yaml.

`check_body(kind, value)` and `check_event(name, data)` raise AssertionError naming the path.
"""
from __future__ import annotations

from jsonschema import Draft202012Validator


def closed(required: dict, optional: dict | None = None) -> dict:
    return {"type": "object", "required": list(required), "additionalProperties": False,
            "properties": {**required, **(optional or {})}}


STRING, INT = {"type": "string"}, {"type": "integer", "minimum": 0}
NULLABLE_INT = {"type": ["integer", "null"], "minimum": 0}


def const(value) -> dict:
    return {"const": value}


USAGE = closed({"input_tokens": INT, "output_tokens": INT},
               {"cache_creation_input_tokens": NULLABLE_INT, "cache_read_input_tokens": NULLABLE_INT,
                "cache_creation": {"type": ["object", "null"]}, "server_tool_use": {"type": ["object", "null"]},
                "service_tier": {"type": ["string", "null"], "enum": ["standard", "priority", "batch", None]}})
TEXT_BLOCK = closed({"type": const("text"), "text": STRING}, {"citations": {"type": ["array", "null"]}})
THINKING_BLOCK = closed({"type": const("thinking"), "thinking": STRING, "signature": STRING})
REDACTED_THINKING_BLOCK = closed({"type": const("redacted_thinking"), "data": STRING})
TOOL_USE_BLOCK = closed({"type": const("tool_use"), "id": {"type": "string", "pattern": "^toolu_"},
                         "name": STRING, "input": {"type": "object"}})
CONTENT_BLOCK = {"oneOf": [TEXT_BLOCK, THINKING_BLOCK, REDACTED_THINKING_BLOCK, TOOL_USE_BLOCK]}
STOP_REASON = {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"]}
MESSAGE = closed({"id": {"type": "string", "pattern": "^msg_"}, "type": const("message"),
                  "role": const("assistant"), "model": STRING,
                  "content": {"type": "array", "items": CONTENT_BLOCK},
                  "stop_reason": STOP_REASON, "stop_sequence": {"type": ["string", "null"]},
                  "usage": USAGE}, {"container": {"type": ["object", "null"]}})
# message_start's message: no content yet and no stop reason.
STARTED_MESSAGE = {**MESSAGE, "properties": {**MESSAGE["properties"], "content": {"type": "array", "maxItems": 0},
                                             "stop_reason": {"type": "null"}, "stop_sequence": {"type": "null"}}}
ERROR_TYPES = ["invalid_request_error", "authentication_error", "billing_error", "permission_error",
               "not_found_error", "request_too_large", "rate_limit_error", "api_error", "timeout_error",
               "overloaded_error"]
ERROR = closed({"type": const("error"), "error": closed({"type": {"enum": ERROR_TYPES}, "message": STRING},
                                                         {"details": {"type": "object"}})},
               {"request_id": {"type": ["string", "null"]}})
MODEL_INFO = closed({"type": const("model"), "id": STRING, "display_name": STRING,
                     "created_at": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"}},
                    {"lifecycle": {"enum": ["active", "deprecated", "retired"]}, "max_input_tokens": INT,
                     "max_tokens": INT})

BODIES = {
    "message": MESSAGE,
    "error": ERROR,
    "count_tokens": closed({"input_tokens": INT}),
    "model": MODEL_INFO,
    "model_list": closed({"data": {"type": "array", "items": MODEL_INFO}, "has_more": {"type": "boolean"},
                          "first_id": {"type": ["string", "null"]}, "last_id": {"type": ["string", "null"]}}),
}

DELTAS = {"oneOf": [closed({"type": const("text_delta"), "text": STRING}),
                    closed({"type": const("input_json_delta"), "partial_json": STRING}),
                    closed({"type": const("thinking_delta"), "thinking": STRING}),
                    closed({"type": const("signature_delta"), "signature": STRING}),
                    closed({"type": const("citations_delta"), "citation": {"type": "object"}})]}
STARTED_BLOCK = {"oneOf": [closed({"type": const("text"), "text": const("")}, {"citations": {"type": ["array", "null"]}}),
                           closed({"type": const("thinking"), "thinking": const(""), "signature": STRING}),
                           closed({"type": const("tool_use"), "id": {"type": "string", "pattern": "^toolu_"},
                                   "name": STRING, "input": {"type": "object", "maxProperties": 0}}),
                           REDACTED_THINKING_BLOCK]}
EVENTS = {
    "message_start": closed({"type": const("message_start"), "message": STARTED_MESSAGE}),
    "content_block_start": closed({"type": const("content_block_start"), "index": INT,
                                   "content_block": STARTED_BLOCK}),
    "ping": closed({"type": const("ping")}),
    "content_block_delta": closed({"type": const("content_block_delta"), "index": INT, "delta": DELTAS}),
    "content_block_stop": closed({"type": const("content_block_stop"), "index": INT}),
    "message_delta": closed({"type": const("message_delta"),
                             "delta": closed({"stop_reason": STOP_REASON,
                                              "stop_sequence": {"type": ["string", "null"]}},
                                             {"container": {"type": ["object", "null"]}}),
                             "usage": closed({"output_tokens": INT},
                                             {"input_tokens": NULLABLE_INT,
                                              "cache_creation_input_tokens": NULLABLE_INT,
                                              "cache_read_input_tokens": NULLABLE_INT,
                                              "server_tool_use": {"type": ["object", "null"]}})}),
    "message_stop": closed({"type": const("message_stop")}),
    "error": ERROR,
}


def _check(schema: dict, value, what: str) -> None:
    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = "/".join(map(str, error.absolute_path)) or "(root)"
        raise AssertionError(f"{what} does not match Anthropic's reference at {where}: {error.message}\n{value!r}")


def check_body(kind: str, value) -> None:
    _check(BODIES[kind], value, kind)


def check_event(name: str, data) -> None:
    assert name in EVENTS, f"unknown event {name!r}"
    assert data.get("type") == name, f"event {name!r} carries type {data.get('type')!r}"
    _check(EVENTS[name], data, f"event {name}")
