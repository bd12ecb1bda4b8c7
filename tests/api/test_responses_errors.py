"""Bad requests get the provider's JSON error envelope with the right status, type, param and
code -- never a 500, never problem+json. Raw HTTP against the live server, plus the SDK."""
from __future__ import annotations

import httpx
import openai
import pytest

from our_spec import check_error, check_exchange


def post(server, body=None, *, content=None, headers=None, path="/responses"):
    kwargs = {"json": body} if content is None else {"content": content}
    response = httpx.post(f"{server.base}{path}", headers=headers, timeout=30, **kwargs)
    return response


def bad_request(server, body=None, **kwargs) -> dict:
    response = post(server, body, **kwargs)
    check_exchange(response)
    error = check_error(response, 400)
    assert error["type"] == "invalid_request_error"
    return error


def test_malformed_json(server):
    error = bad_request(server, content=b'{"model": "gpt-4o",', headers={"content-type": "application/json"})
    assert error["code"] == "invalid_json" and error["param"] is None


def test_body_that_is_not_utf8(server):
    error = bad_request(server, content=b'{"model": "\xff\xfe"}', headers={"content-type": "application/json"})
    assert error["code"] == "invalid_json"


def test_empty_body(server):
    error = bad_request(server, content=b"", headers={"content-type": "application/json"})
    assert error["message"]


def test_body_that_is_not_an_object(server):
    error = bad_request(server, [1, 2])
    assert error["param"] is None
    assert "None" not in error["message"]


def test_missing_model(server):
    error = bad_request(server, {"input": "hi"})
    assert (error["param"], error["code"]) == ("model", "missing_required_parameter")


@pytest.mark.parametrize("field, value", [("model", 5), ("temperature", "hot"), ("stream", "yes"),
                                          ("metadata", "x"), ("input", 42), ("max_output_tokens", 1.5),
                                          ("tools", {"type": "function"})])
def test_wrong_type_names_the_field(server, field, value):
    error = bad_request(server, {"model": "gpt-4o", "input": "hi", field: value})
    assert error["param"] == field
    assert error["code"] == "invalid_value"


@pytest.mark.parametrize("field, value", [("temperature", 2.5), ("top_p", -0.1), ("max_output_tokens", 0),
                                          ("truncation", "sometimes"), ("service_tier", "gold")])
def test_out_of_range_value_names_the_field(server, field, value):
    assert bad_request(server, {"model": "gpt-4o", "input": "hi", field: value})["param"] == field


def test_unknown_field_is_named(server):
    error = bad_request(server, {"model": "gpt-4o", "input": "hi", "temprature": 1})
    assert error["param"] == "temprature"
    assert "temprature" in error["message"]


def test_metadata_with_more_than_16_pairs(server):
    metadata = {f"k{i}": "v" for i in range(17)}
    assert bad_request(server, {"model": "gpt-4o", "input": "hi", "metadata": metadata})["param"] == "metadata"


def test_unknown_input_item_type_names_it(server):
    error = bad_request(server, {"model": "gpt-4o", "input": [{"role": "user", "content": "hi"},
                                                               {"type": "telepathy", "thought": "x"}]})
    assert error["param"] == "input[1].type"
    assert "telepathy" in error["message"]


def test_unknown_content_part_type_names_its_path(server):
    error = bad_request(server, {"model": "gpt-4o", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_smell"}]}]})
    assert error["param"] == "input[0].content[1].type"


def test_unknown_role_names_its_path(server):
    error = bad_request(server, {"model": "gpt-4o", "input": [{"role": "robot", "content": "hi"}]})
    assert error["param"].startswith("input[0]")


def test_unknown_tool_type_names_it(server):
    error = bad_request(server, {"model": "gpt-4o", "input": "hi",
                                 "tools": [{"type": "function", "name": "f"}, {"type": "teleporter"}]})
    assert error["param"] == "tools[1].type"
    assert "teleporter" in error["message"]


def test_unknown_tool_choice_type_names_it(server):
    error = bad_request(server, {"model": "gpt-4o", "input": "hi", "tool_choice": {"type": "magic"}})
    assert error["param"].startswith("tool_choice")


def test_deeply_nested_body_is_rejected(server):
    nested = "x"
    for _ in range(200):
        nested = {"a": nested}
    error = bad_request(server, {"model": "gpt-4o", "input": "hi", "metadata": nested})
    assert error["code"] == "invalid_json"


def test_unknown_model_is_404_model_not_found(server):
    response = post(server, {"model": "gpt-99", "input": "hi"})
    check_exchange(response)
    error = check_error(response, 404)
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "model_not_found", "model")
    assert "gpt-99" in error["message"]


def test_wrong_content_type_is_415_json(server):
    response = post(server, content=b'{"model": "gpt-4o"}', headers={"content-type": "text/plain"})
    assert check_error(response, 415)["code"] == "unsupported_media_type"


def test_unknown_route_is_404_json(server):
    response = httpx.get(f"{server.base}/nothing-here")
    assert check_error(response, 404)["code"] == "not_found"


def test_wrong_method_is_405_json_with_allow_header(server):
    response = httpx.delete(f"{server.base}/responses")
    assert check_error(response, 405)["code"] == "method_not_allowed"
    assert "POST" in response.headers["allow"]


def test_sdk_raises_bad_request_with_param(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-4o", input="hi", temperature=9)
    assert caught.value.param == "temperature"
    assert caught.value.body["type"] == "invalid_request_error"


def test_sdk_raises_not_found_for_unknown_model(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="gpt-99", input="hi")
    assert caught.value.code == "model_not_found"


def test_max_output_tokens_above_the_model_limit(server):
    error = bad_request(server, {"model": "gpt-4", "input": "hi", "max_output_tokens": 9000})
    assert error["param"] == "max_output_tokens"


def test_input_longer_than_the_context_window(server):
    error = bad_request(server, {"model": "gpt-4", "input": "word " * 9000})
    assert error["code"] == "context_length_exceeded"


def test_nullable_parameters_accept_null(server):
    nulls = {name: None for name in ("instructions", "temperature", "top_p", "max_output_tokens", "tools",
                                     "tool_choice", "metadata", "reasoning", "include", "text", "truncation",
                                     "parallel_tool_calls", "store", "previous_response_id", "service_tier")}
    response = post(server, {"model": "gpt-4o", "input": "hi", **nulls})
    check_exchange(response)
    body = response.json()
    assert response.status_code == 200, body
    assert (body["temperature"], body["tool_choice"], body["tools"]) == (1.0, "auto", [])


def test_integer_beyond_64_bits_is_read_as_an_integer(server):
    error = bad_request(server, {"model": "gpt-4o", "input": "hi", "max_output_tokens": 10 ** 30})
    assert error["param"] == "max_output_tokens"
    assert "float" not in error["message"]
    assert "1000000000000000000000000000000" in error["message"]  # read exactly, not as 1e+30


def test_integer_below_minus_2_to_the_63_is_read_as_an_integer(server):
    error = bad_request(server, {"model": "gpt-4o", "input": "hi", "max_output_tokens": -9999999999999999999})
    assert error["param"] == "max_output_tokens"
    assert "-9999999999999999999" in error["message"]       # 19 digits, not -1e+19
