"""Self-tests for tests/oai_schemas.py: the validator accepts good objects and
catches bad ones."""

import copy
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parents[1]))

import pytest  # noqa: E402

import oai_schemas  # noqa: E402
from oai_schemas import (  # noqa: E402
    departures,
    validate,
    validate_chat_chunk,
    validate_chat_completion,
    validate_error_body,
    validate_response_event,
    validate_ws_error,
)

if not oai_schemas.available():  # pragma: no cover
    pytest.skip(oai_schemas.MISSING, allow_module_level=True)


def text_delta(**overrides):
    event = {
        "type": "response.output_text.delta",
        "item_id": "msg_123",
        "output_index": 0,
        "content_index": 0,
        "delta": "Hel",
        "sequence_number": 4,
        "logprobs": [],
    }
    event.update(overrides)
    return event


def reasoning_item(**overrides):
    item = {
        "type": "reasoning",
        "id": "rs_123",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "thinking"}],
        "encrypted_content": None,
        "status": "completed",
    }
    item.update(overrides)
    return item


def message_item():
    return {
        "type": "message",
        "id": "msg_123",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}],
    }


def response(output=(), status="completed"):
    return {
        "id": "resp_123",
        "object": "response",
        "created_at": 1741476542,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "model": "gpt-4o-2024-08-06",
        "tools": [],
        "tool_choice": "auto",
        "output": list(output),
        "parallel_tool_calls": True,
        "metadata": {},
        "temperature": 1.0,
        "top_p": 1.0,
        "usage": {
            "input_tokens": 12,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 30,
            "output_tokens_details": {"reasoning_tokens": 20},
            "total_tokens": 42,
        },
    }


def output_item_done(item):
    return {"type": "response.output_item.done", "output_index": 0, "sequence_number": 9, "item": item}


# -- Responses stream events ---------------------------------------------------


def test_text_delta_passes():
    validate_response_event(text_delta())


def test_text_delta_missing_logprobs_fails():
    event = text_delta()
    del event["logprobs"]
    with pytest.raises(AssertionError, match=r"ResponseTextDeltaEvent.*'logprobs' is a required property"):
        validate_response_event(event)


def test_wrong_field_type_reports_json_path():
    with pytest.raises(AssertionError, match=r"\$\.output_index: '0' is not of type 'integer'"):
        validate_response_event(text_delta(output_index="0"))


def test_unknown_event_type_fails():
    with pytest.raises(AssertionError, match="unknown Responses stream event type"):
        validate_response_event(text_delta(type="response.output_text.deltaa"))
    with pytest.raises(AssertionError, match="unknown"):
        validate_response_event({"delta": "x"})


def test_event_table_prefers_stream_union_members():
    table = oai_schemas._event_table()
    assert table["response.output_text.delta"] == "ResponseTextDeltaEvent"
    assert table["response.created"] == "ResponseCreatedEvent"
    assert table["error"] == "ResponseErrorEvent"


def test_full_response_events_pass():
    resp = response([reasoning_item(), message_item()])
    validate_response_event({"type": "response.created", "sequence_number": 0, "response": response(status="in_progress")})
    validate_response_event({"type": "response.completed", "sequence_number": 12, "response": resp})
    validate_response_event(output_item_done(message_item()))


def test_nested_output_item_error_is_found():
    # The OutputItem union is discriminated by `type`; the error must point into the message.
    item = message_item()
    del item["content"][0]["annotations"]
    with pytest.raises(AssertionError, match=r"\$\.response\.output\[0\]\.content\[0\]: 'annotations' is a required"):
        validate_response_event({"type": "response.completed", "sequence_number": 3, "response": response([item])})


def test_unknown_output_item_type_fails():
    with pytest.raises(AssertionError, match=r"\$\.item: type 'bogus' matches no member"):
        validate_response_event(output_item_done({"type": "bogus", "id": "x"}))


# -- departures ----------------------------------------------------------------


def test_departures_file_is_read():
    ids = [d["id"] for d in departures()]
    assert "reasoning-summary-null" in ids
    assert "total-tokens-include-reasoning" in ids
    for entry in departures():
        assert {"id", "where", "ours", "openai", "why", "normalize"} <= set(entry)


def test_reasoning_summary_null_passes_only_via_departure(monkeypatch):
    event = output_item_done(reasoning_item(summary=None))
    original = copy.deepcopy(event)
    validate_response_event(event)  # accepted thanks to the departure
    assert event == original  # the caller's object is not modified

    # Also inside a full response's output array.
    validate_response_event(
        {"type": "response.completed", "sequence_number": 5, "response": response([reasoning_item(summary=None)])}
    )

    # Without the departure rules, OpenAI's schema rejects it.
    monkeypatch.setattr(oai_schemas, "_rules", [])
    with pytest.raises(AssertionError, match=r"\$\.item\.summary: None is not of type 'array'"):
        validate_response_event(event)


def test_departure_does_not_hide_other_violations():
    # summary null is tolerated, a missing id is not
    item = reasoning_item(summary=None)
    del item["id"]
    with pytest.raises(AssertionError, match=r"'id' is a required property[\s\S]*reasoning-summary-null"):
        validate_response_event(output_item_done(item))
    # a missing summary (as opposed to null) is not covered by the departure either
    item = reasoning_item()
    del item["summary"]
    with pytest.raises(AssertionError, match="'summary' is a required property"):
        validate_response_event(output_item_done(item))


# -- errors ----------------------------------------------------------------------


def test_error_body():
    body = {"error": {"type": "invalid_request_error", "message": "bad", "param": None, "code": None}}
    validate_error_body(body)
    del body["error"]["param"]
    with pytest.raises(AssertionError, match=r"ErrorResponse.*\$\.error: 'param' is a required property"):
        validate_error_body(body)


def test_ws_error_and_stream_error_event():
    validate_ws_error(
        {
            "type": "error",
            "status": 400,
            "error": {"type": "invalid_request_error", "code": "bad", "message": "m", "param": None},
        }
    )
    validate_response_event({"type": "error", "code": None, "message": "m", "param": None, "sequence_number": 2})
    with pytest.raises(AssertionError, match="ResponseWsError"):
        validate_ws_error({"type": "error", "status": 400})


# -- chat completions --------------------------------------------------------------


def test_chat_chunk_and_completion():
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1741476542,
        "model": "gpt-4o",
        # finish_reason/usage null rely on the document's OAS 3.0 `nullable: true`
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": None, "logprobs": None}],
        "usage": None,
    }
    validate_chat_chunk(chunk)
    with pytest.raises(AssertionError, match="'finish_reason' is a required property"):
        validate_chat_chunk({**chunk, "choices": [{"index": 0, "delta": {}}]})

    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1741476542,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "logprobs": None,
                "message": {"role": "assistant", "content": "Hi", "refusal": None, "annotations": []},
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
    validate_chat_completion(body)
    with pytest.raises(AssertionError, match=r"\$\.choices\[0\]\.finish_reason: None is not one of"):
        validate_chat_completion({**body, "choices": [{**body["choices"][0], "finish_reason": None}]})


def test_unknown_schema_name():
    with pytest.raises(KeyError):
        validate("NoSuchSchema", {})
