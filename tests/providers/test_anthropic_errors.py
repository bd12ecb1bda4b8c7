"""Anthropic's errors through the official `anthropic` SDK against one live server that needs an
API key: authentication with `x-api-key`, request validation, unknown models and routes, body
size, every immediate fault kind with Anthropic's status and type, mid-stream faults as an
`error` event, and a content filter. Every body and event is checked against Anthropic's
reference (tests/anthropic_schemas.py)."""
from __future__ import annotations

import anthropic
import httpx
import pytest

import sse
from anthropic_schemas import check_body, check_event
from conftest import LiveServer
from llmsim.faults.kinds import load_kinds

MODEL = "claude-haiku-4-5"
KEY = "sk-ant-llmsim-test"
LIMIT = 100_000           # --max-body-bytes
HELLO = [{"role": "user", "content": "Say something."}]
ARGS = {"model": MODEL, "max_tokens": 100, "messages": HELLO}
KINDS = load_kinds()
# The error type Anthropic sends with each status (its errors reference).
TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
         502: "api_error", 503: "api_error", 504: "api_error", 529: "overloaded_error"}
# The SDK's exception class for each status.
SDK_ERRORS = {400: anthropic.BadRequestError, 401: anthropic.AuthenticationError,
              403: anthropic.PermissionDeniedError, 404: anthropic.NotFoundError,
              429: anthropic.RateLimitError, 500: anthropic.InternalServerError,
              502: anthropic.InternalServerError, 503: anthropic.ServiceUnavailableError,
              504: anthropic.GatewayTimeoutError, 529: anthropic.OverloadedError}
IMMEDIATE = sorted(name for name, kind in KINDS.items() if kind.effect in ("error", "timeout"))


@pytest.fixture(scope="module")
def server(live_server_factory) -> LiveServer:
    return live_server_factory("--profile", "instant", "--target-tokens", "20", "--api-key", KEY,
                               "--max-body-bytes", str(LIMIT))


@pytest.fixture(scope="module")
def client(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)


def fault(value: str) -> dict:
    return {"extra_headers": {"x-llmsim-fault": value}}


def post(server, path: str, body, headers: dict | None = None) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=30,
                      headers={"x-api-key": KEY, "anthropic-version": "2023-06-01", **(headers or {})})


def envelope(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    check_body("error", body)
    assert body["error"]["type"] == TYPES[status]
    return body


def test_x_api_key_is_accepted(client):
    assert client.messages.create(**ARGS).content[0].text


def test_a_bearer_key_is_accepted_too(server):
    bearer = anthropic.Anthropic(base_url=server.url, auth_token=KEY, max_retries=0)
    assert bearer.messages.create(**ARGS).stop_reason == "end_turn"


def test_a_wrong_x_api_key_is_an_authentication_error(server):
    wrong = anthropic.Anthropic(base_url=server.url, api_key="sk-ant-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        wrong.messages.create(**ARGS)
    assert caught.value.body["error"] == {"type": "authentication_error", "message": "invalid x-api-key"}
    envelope(httpx.post(server.url + "/v1/messages", json=ARGS, headers={"x-api-key": "nope"}), 401)


def test_a_missing_key_is_an_authentication_error(server):
    """Anthropic's own words, naming its header (not OpenAI's Bearer advice)."""
    body = envelope(httpx.post(server.url + "/anthropic/v1/messages", json=ARGS), 401)
    assert body["error"]["message"] == "x-api-key header is required"
    body = envelope(httpx.post(server.url + "/v1/messages", json=ARGS, headers={"anthropic-version": "2023-06-01"}), 401)
    assert body["error"]["message"] == "x-api-key header is required"


def test_an_invalid_body_gets_anthropics_envelope(server, client):
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=MODEL, messages=HELLO, max_tokens=0)
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    body = envelope(post(server, "/v1/messages", {"model": MODEL, "messages": HELLO}), 400)
    assert "max_tokens" in body["error"]["message"]
    envelope(post(server, "/v1/messages", {**ARGS, "messages": [{"role": "system", "content": "x"}]}), 400)
    envelope(httpx.post(server.url + "/v1/messages", content=b"{not json", timeout=30,
                        headers={"x-api-key": KEY, "content-type": "application/json"}), 400)


def test_rules_between_fields_get_anthropics_envelope(server):
    thinking = {"type": "enabled", "budget_tokens": 2000}
    body = envelope(post(server, "/v1/messages", {**ARGS, "max_tokens": 1500, "thinking": thinking}), 400)
    assert "budget_tokens" in body["error"]["message"]
    tools = [{"name": "a", "input_schema": {"type": "object"}}]
    envelope(post(server, "/v1/messages", {**ARGS, "tools": tools, "tool_choice": {"type": "tool", "name": "b"}}), 400)
    envelope(post(server, "/v1/messages", {**ARGS, "max_tokens": 10_000_000}), 400)


def test_an_unknown_model_is_not_found(client):
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.create(**{**ARGS, "model": "claude-nonexistent"})
    assert caught.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("claude-nonexistent")


def test_an_unknown_route_under_the_anthropic_prefix_is_not_found(server):
    envelope(httpx.get(server.url + "/anthropic/v1/nothing-here", headers={"x-api-key": KEY}), 404)


def test_openai_routes_keep_openais_envelope(server):
    response = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL}, timeout=30,
                          headers={"authorization": f"Bearer {KEY}"})
    assert response.status_code == 400
    assert set(response.json()["error"]) >= {"message", "type", "param", "code"}


def test_a_body_over_the_limit_is_request_too_large(server):
    big = {**ARGS, "messages": [{"role": "user", "content": "x" * (LIMIT + 1)}]}
    envelope(post(server, "/v1/messages", big), 413)


@pytest.mark.parametrize("name", IMMEDIATE)
def test_each_immediate_fault_raises_the_sdks_exception(server, client, name):
    status = KINDS[name].for_api("anthropic").status
    with pytest.raises(SDK_ERRORS[status]) as caught:
        client.messages.create(**ARGS, **fault(f"{name};timeout_after_ms=1"))
    assert caught.value.status_code == status
    check_body("error", caught.value.body)
    assert caught.value.body["error"]["type"] == TYPES[status]


def test_overloaded_is_a_529_with_retry_after(server):
    response = post(server, "/v1/messages", ARGS, {"x-llmsim-fault": "overloaded;retry_after=2"})
    body = envelope(response, 529)
    assert body["error"]["message"] == "Overloaded"
    assert response.headers["retry-after"] == "2"


def test_rate_limit_is_a_429_with_retry_after(server):
    response = post(server, "/v1/messages", ARGS, {"x-llmsim-fault": "rate_limit;retry_after=3"})
    envelope(response, 429)
    assert response.headers["retry-after"] == "3"


def test_the_sdk_retries_an_overload_and_then_succeeds(server):
    schedule = httpx.post(server.url + "/llmsim/faults", timeout=30, headers={"authorization": f"Bearer {KEY}"},
                          json={"schedule": [{"kind": "overloaded", "count": 1, "retry_after": 0}]})
    assert schedule.status_code == 200
    retrying = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=1)
    assert retrying.messages.create(**ARGS).stop_reason == "end_turn"
    assert httpx.get(server.url + "/llmsim/faults").json()["injected"]["overloaded"] >= 1


def stream_events(server, value: str) -> list[tuple[str, dict]]:
    with httpx.stream("POST", server.url + "/v1/messages", json={**ARGS, "stream": True}, timeout=30,
                      headers={"x-api-key": KEY, "x-llmsim-fault": value}) as response:
        assert response.status_code == 200
        events = sse.parse(response.read().decode())    # strict: frames end with a blank line
    for name, data in events:
        check_event(name, data)
    return events


def test_an_overload_mid_stream_is_an_error_event(server, client):
    events = stream_events(server, "overloaded;after_tokens=3")
    names = [name for name, _ in events]
    assert names[-1] == "error" and "message_stop" not in names
    assert names.count("content_block_delta") == 3
    assert events[-1][1]["error"]["type"] == "overloaded_error"
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(**ARGS, **fault("overloaded;after_tokens=3")) as stream:
            for _ in stream:
                pass
    assert caught.value.body["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize("name", ["stream_error", "stream_failed"])
def test_a_failed_stream_ends_with_an_api_error_event(server, name):
    events = stream_events(server, f"{name};after_tokens=2")
    assert [n for n, _ in events].count("content_block_delta") == 2
    assert events[-1] == ("error", {"type": "error", "error": {"type": "api_error", "message": KINDS[name].message}})


def test_a_content_filter_stops_with_refusal(client):
    message = client.messages.create(**ARGS, **fault("content_filter;after_tokens=4"))
    assert message.stop_reason == "refusal"
    assert message.usage.output_tokens == 4
    with client.messages.stream(**ARGS, **fault("content_filter;after_tokens=4")) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "refusal" and final.content[0].text == message.content[0].text


def test_answers_are_counted_in_stats(server, client):
    before = httpx.get(server.url + "/llmsim/stats").json()
    client.messages.create(**ARGS)
    after = httpx.get(server.url + "/llmsim/stats").json()
    assert after["endpoints"]["messages"]["requests"] > before["endpoints"].get("messages", {}).get("requests", 0)
    assert after["models"][MODEL]["completion_tokens"] >= 20


def test_truncated_output_stops_at_max_tokens_with_half_the_text(client):
    whole = client.messages.create(**ARGS)
    cut = client.messages.create(**ARGS, **fault("truncated_output"))
    assert cut.stop_reason == "max_tokens"
    assert cut.usage.output_tokens == whole.usage.output_tokens // 2
    assert whole.content[0].text.startswith(cut.content[0].text)
