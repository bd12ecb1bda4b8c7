"""GET / POST / DELETE /llmsim/faults: the schedule and rates changed at runtime."""
from __future__ import annotations

import httpx
import openai
import pytest
import yaml

from conftest import REPO
from llmsim.testing import Server

BODY = {"model": "gpt-4o-mini", "input": "hi"}


async def test_admin_round_trip(app_client):
    async with app_client() as client:
        empty = (await client.get("/llmsim/faults")).json()
        posted = await client.post("/llmsim/faults", json={
            "schedule": [{"kind": "rate_limit", "count": 2, "retry_after": 3},
                         {"kind": "bad_gateway", "every": 4}],
            "errors": {"server_error": 0.25}})
        state = (await client.get("/llmsim/faults")).json()
        statuses = [(await client.post("/v1/responses", json=BODY)).status_code for _ in range(4)]
        after = (await client.get("/llmsim/faults")).json()
        cleared = (await client.delete("/llmsim/faults")).json()
    assert (empty["schedule"], empty["rates"]) == ([], {})
    assert posted.status_code == 200 and posted.json() == state
    assert [(e["kind"], e["count"], e["every"], e["remaining"], e["retry_after"]) for e in state["schedule"]] == [
        ("rate_limit", 2, None, 2, 3), ("bad_gateway", None, 4, None, None)]
    assert state["rates"] == {"server_error": 0.25}
    assert statuses[:2] == [429, 429] and statuses[3] == 502
    assert after["requests"] == 4 and after["injected"]["rate_limit"] == 2
    assert [e["kind"] for e in after["schedule"]] == ["bad_gateway"]
    assert (cleared["schedule"], cleared["rates"]) == ([], {})


async def test_post_appends_unless_replace(app_client):
    async with app_client(fault_schedule=[{"kind": "overloaded", "count": 1}]) as client:
        appended = (await client.post("/llmsim/faults", json={"schedule": [{"kind": "timeout"}]})).json()
        replaced = (await client.post("/llmsim/faults", json={"schedule": [{"kind": "permission"}],
                                                                "replace": True})).json()
    assert [e["kind"] for e in appended["schedule"]] == ["overloaded", "timeout"]
    assert [e["kind"] for e in replaced["schedule"]] == ["permission"]


@pytest.mark.parametrize("update, param", [
    ({"schedule": [{"kind": "no_such_kind"}]}, "schedule[0].kind"),
    ({"schedule": [{"kind": "rate_limit", "count": 0}]}, "schedule[0].count"),
    ({"errors": {"rate_limit": 2}}, "errors.rate_limit"),
    ({"flavour": 1}, "flavour"),
])
async def test_bad_updates_are_400_naming_the_field_and_change_nothing(app_client, update, param):
    async with app_client() as client:
        response = await client.post("/llmsim/faults", json={"errors": {"timeout": 0.5}, **update})
        state = (await client.get("/llmsim/faults")).json()
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert state["rates"] == {}


@pytest.mark.live
def test_a_kind_from_a_data_dir_can_be_scheduled_and_given_a_rate(tmp_path):
    catalogue = yaml.safe_load((REPO / "llmsim" / "data" / "faults.yaml").read_text())
    catalogue["kinds"]["teapot"] = {"status": 418, "type": "invalid_request_error", "code": "teapot",
                                    "message": "I'm a teapot."}
    (tmp_path / "faults.yaml").write_text(yaml.safe_dump(catalogue))
    with Server(["--data", str(tmp_path), "--profile", "instant"]) as server:
        update = httpx.post(server.url + "/llmsim/faults",
                            json={"schedule": [{"kind": "teapot"}], "errors": {"teapot": 0.5}})
        answer = httpx.post(server.openai_url + "/responses", json={"model": "gpt-4o", "input": "hi"})
    assert update.status_code == 200 and update.json()["rates"] == {"teapot": 0.5}
    assert answer.status_code == 418 and answer.json()["error"]["code"] == "teapot"


@pytest.fixture
def admin(server):
    """The shared live server's admin endpoint, cleared after the test."""
    with httpx.Client(base_url=f"{server.url}/llmsim") as http:
        yield http
        http.delete("/faults")


def test_runtime_schedule_through_the_sdk(server, admin):
    admin.post("/faults", json={"schedule": [{"kind": "insufficient_quota", "count": 1}]}).raise_for_status()
    client = server.client()
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(**BODY)
    assert caught.value.code == "insufficient_quota"
    assert client.responses.create(**BODY).status == "completed"
    assert admin.get("/faults").json()["schedule"] == []


def test_runtime_schedule_with_retry_after_and_sdk_retries(server, admin):
    admin.post("/faults", json={"schedule": [{"kind": "rate_limit", "count": 1, "retry_after": 0.5}]})
    client = openai.OpenAI(base_url=server.base, api_key="sk-test", max_retries=1)
    response = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert response.retries_taken == 1
    assert response.parse().choices[0].finish_reason == "stop"
