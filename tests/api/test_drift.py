"""Drift against the newest SDK: what llmsim sends parses into `openai.types`, with no field the
SDK does not declare unless openapi/departures.yaml excuses it (tests/sdk_types.py, bench/drift.py)."""
from __future__ import annotations

import importlib.util

import pytest

import sdk_types
from conftest import REPO

MODEL = {"id": "gpt-4o", "object": "model", "created": 1715367049, "owned_by": "system"}


@pytest.fixture
def made_up():
    """For checks of made-up bodies: kept out of the run's drift report."""
    with sdk_types.isolated(keep=False):
        yield


def _drift_module():
    spec = importlib.util.spec_from_file_location("drift_bench", REPO / "bench" / "drift.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_live_server_sends_no_field_unknown_to_the_sdk(server):
    drift = _drift_module()
    with sdk_types.isolated():
        collector = drift.collect(server.base)
        print(sdk_types.report())
        unexcused = drift.unexcused()
    assert collector.checked > 100       # every kind of call ran, streams included
    assert collector.problems == []
    assert unexcused == []


def test_a_field_the_sdk_does_not_declare_fails_the_check(made_up):
    with pytest.raises(AssertionError, match=r"\$\.colour: Model\.colour"):
        sdk_types.check("Model", {**MODEL, "colour": "blue"})


def test_an_unknown_field_inside_a_nested_object_is_found(made_up):
    body = {"error": {"message": "Bad.", "type": "invalid_request_error", "param": None, "code": None,
                      "hint": "x"}}
    with pytest.raises(AssertionError, match=r"\$\.error\.hint: ErrorObject\.hint"):
        sdk_types.check("ErrorResponse", body)


def test_a_departure_excuses_the_fields_it_lists(made_up):
    assert "CompletionUsage.time_to_first_token" in sdk_types.excused()
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3, "time_to_first_token": 5.0}
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
             "choices": [], "usage": usage}
    sdk_types.check("CreateChatCompletionStreamResponse", chunk)


def test_a_body_of_the_wrong_type_does_not_parse(made_up):
    with pytest.raises(AssertionError, match="does not parse as the SDK's Model"):
        sdk_types.check("Model", {**MODEL, "created": "yesterday"})


def test_fields_the_sdk_declares_but_were_not_sent_are_collected(made_up):
    sdk_types.check("ErrorResponse", {"error": {"message": "Bad.", "type": "invalid_request_error"}})
    assert set(sdk_types.missing()["ErrorObject"]) >= {"code", "param"}


def test_an_event_type_the_sdk_does_not_know_fails(made_up):
    with pytest.raises(AssertionError, match="no member of the SDK's union"):
        sdk_types.check_event({"type": "response.made_up", "sequence_number": 1})


def test_responses_echo_prompt_cache_key_and_safety_identifier_null_when_unset(client):
    unset = client.responses.with_raw_response.create(model="gpt-4o", input="hi").http_response.json()
    given = client.responses.create(model="gpt-4o", input="hi", prompt_cache_key="pck-1",
                                    safety_identifier="user-hash-1")
    assert (unset["prompt_cache_key"], unset["safety_identifier"]) == (None, None)
    assert (given.prompt_cache_key, given.safety_identifier) == ("pck-1", "user-hash-1")
