"""Fault injection in-process: the catalogue, the three triggers, mid-stream tails, API keys."""
from __future__ import annotations

import pytest

import oai_schemas
from llmsim.errors import ConfigError
from llmsim.faults.kinds import load_kinds
from llmsim.settings import Settings
from sse import parse

KINDS = load_kinds()
IMMEDIATE = sorted(name for name, kind in KINDS.items() if kind.effect in ("error", "timeout"))
BODY = {"model": "gpt-4o-mini", "input": "Say something."}
FAULT = "x-llmsim-fault"


async def create(client, headers=None, **extra):
    return await client.post("/v1/responses", json={**BODY, **extra}, headers=headers or {})


@pytest.mark.parametrize("name", IMMEDIATE)
async def test_header_fault_answers_with_the_catalogued_error(shared_app_client, name):
    kind = KINDS[name]
    async with shared_app_client() as client:
        response = await create(client, {FAULT: f"{name};timeout_after_ms=1"})
    assert response.status_code == kind.status
    body = response.json()
    oai_schemas.validate_error_body(body)
    assert (body["error"]["type"], body["error"]["code"]) == (kind.type, kind.code)


async def test_rate_limit_carries_retry_and_ratelimit_headers(shared_app_client):
    async with shared_app_client() as client:
        response = await create(client, {FAULT: "rate_limit;retry_after=2.5"})
    assert response.status_code == 429
    assert response.headers["retry-after"] == "2.5"
    assert response.headers["retry-after-ms"] == "2500"
    assert response.headers["x-ratelimit-remaining-requests"] == "0"
    assert "2.5s" in response.json()["error"]["message"]


async def test_context_length_names_the_input(shared_app_client):
    async with shared_app_client() as client:
        response = await create(client, {FAULT: "context_length"})
    assert response.json()["error"]["param"] == "input"


@pytest.mark.parametrize("value, why", [("no_such_kind", "unknown fault kind"),
                                        ("rate_limit;bogus=1", "unknown parameter"),
                                        ("rate_limit;after_tokens=x", "after_tokens"),
                                        ("timeout;timeout_after_ms=inf", "timeout_after_ms"),
                                        ("rate_limit;retry_after=nan", "retry_after")])
async def test_bad_fault_header_is_a_400_naming_the_header(shared_app_client, value, why):
    async with shared_app_client() as client:
        response = await create(client, {FAULT: value})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == FAULT and why in error["message"]


async def test_content_filter_makes_an_incomplete_response(app_client):
    async with app_client() as client:
        body = (await create(client, {FAULT: "content_filter;after_tokens=3"})).json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "content_filter"}
    assert body["usage"]["output_tokens"] == 3
    oai_schemas.validate("Response", body)


async def test_content_filter_stream_ends_with_response_incomplete(app_client):
    async with app_client() as client:
        text = (await create(client, {FAULT: "content_filter;after_tokens=2"}, stream=True)).text
    events = parse(text)
    deltas = [data for name, data in events if name == "response.output_text.delta"]
    assert len(deltas) == 2
    assert events[-1][0] == "response.incomplete"
    assert events[-1][1]["response"]["incomplete_details"] == {"reason": "content_filter"}


async def test_stream_failed_ends_with_response_failed_after_k_tokens(app_client):
    async with app_client() as client:
        text = (await create(client, {FAULT: "stream_failed;after_tokens=4"}, stream=True)).text
    events = parse(text)
    for _, data in events:
        oai_schemas.validate_response_event(data)
    assert [d for n, d in events if n == "response.output_text.delta"].__len__() == 4
    name, last = events[-1]
    assert name == "response.failed"
    assert last["response"]["status"] == "failed"
    assert last["response"]["error"]["code"] == "server_error"
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))


async def test_stream_error_ends_with_an_error_event(app_client):
    async with app_client() as client:
        text = (await create(client, {FAULT: "stream_error;after_tokens=1"}, stream=True)).text
    events = parse(text)
    name, last = events[-1]
    assert name == "error"
    oai_schemas.validate_response_event(last)
    assert last["code"] == "server_error"
    assert [n for n, _ in events].count("response.output_text.delta") == 1


async def test_any_error_kind_with_after_tokens_fails_mid_stream(app_client):
    async with app_client() as client:
        text = (await create(client, {FAULT: "rate_limit;after_tokens=2"}, stream=True)).text
    name, last = parse(text)[-1]
    assert (name, last["code"]) == ("error", "rate_limit_exceeded")


async def test_mid_stream_fault_on_a_non_streaming_request_fails_at_once(app_client):
    async with app_client() as client:
        response = await create(client, {FAULT: "stream_failed"})
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "server_error"


async def test_header_none_turns_scheduled_faults_off(app_client):
    async with app_client(fault_schedule=[{"kind": "server_error", "count": 1}]) as client:
        assert (await create(client, {FAULT: "none"})).status_code == 200


async def test_schedule_in_config_fails_the_next_n_requests(app_client):
    async with app_client(fault_schedule=[{"kind": "overloaded", "count": 2}]) as client:
        statuses = [(await create(client)).status_code for _ in range(3)]
    assert statuses == [503, 503, 200]


async def test_schedule_every_kth_request(app_client):
    async with app_client(fault_schedule=[{"kind": "bad_gateway", "every": 3}]) as client:
        statuses = [(await create(client)).status_code for _ in range(7)]
    assert statuses == [200, 200, 502, 200, 200, 502, 200]


async def test_schedule_entry_parameters_apply(app_client):
    schedule = [{"kind": "rate_limit", "count": 1, "retry_after": 7}]
    async with app_client(fault_schedule=schedule) as client:
        response = await create(client)
    assert response.headers["retry-after"] == "7"


async def statuses_with(app_client, seed: int, n: int = 40) -> list[int]:
    async with app_client(seed=seed, errors={"rate_limit": 0.3, "server_error": 0.2}) as client:
        return [(await create(client)).status_code for _ in range(n)]


async def test_rates_with_a_seed_are_reproducible(app_client):
    first = await statuses_with(app_client, 11)
    assert first == await statuses_with(app_client, 11)
    assert {429, 500, 200} <= set(first)


async def test_rates_adding_up_to_more_than_one_fail_every_request(app_client):
    async with app_client(seed=3, errors={"rate_limit": 1, "server_error": 1}) as client:
        statuses = [(await create(client)).status_code for _ in range(20)]
    assert set(statuses) == {429, 500}


async def test_rate_one_fails_every_request(app_client):
    async with app_client(errors={"permission": 1.0}) as client:
        assert {(await create(client)).status_code for _ in range(5)} == {403}


@pytest.mark.parametrize("settings, message", [
    ({"errors": {"no_such_kind": 0.1}}, "unknown fault kind"),
    ({"fault_schedule": [{"kind": "nope"}]}, "fault_schedule[0].kind"),
])
def test_bad_fault_config_fails_start_up(app_client, settings, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        app_client(**settings)


def test_config_schema_rejects_rates_above_one():
    with pytest.raises(ConfigError, match="errors"):
        Settings().replace(errors={"rate_limit": 1.5})


async def test_api_keys_reject_missing_and_wrong_keys(app_client):
    async with app_client(api_keys=["sk-good"]) as client:
        missing = await create(client)
        wrong = await create(client, {"authorization": "Bearer sk-bad"})
        good = await create(client, {"authorization": "Bearer sk-good"})
        health = await client.get("/health")
    for response in (missing, wrong):
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"
    assert (good.status_code, health.status_code) == (200, 200)


async def test_no_api_keys_means_open(app_client):
    async with app_client() as client:
        assert (await client.get("/openai/v1/models")).status_code == 200


def test_auth_mapping_in_config_file_sets_api_keys(tmp_path):
    config = tmp_path / "llmsim.yaml"
    config.write_text("auth:\n  api_keys: [sk-one, sk-two]\n")
    assert Settings.load({"config": str(config)}, environ={}).api_keys == ["sk-one", "sk-two"]


def test_api_keys_from_environment_may_be_comma_separated():
    assert Settings.load({}, environ={"LLMSIM_API_KEYS": "sk-a, sk-b"}).api_keys == ["sk-a", "sk-b"]
