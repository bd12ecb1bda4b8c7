"""`base_paths`: the prefixes the API document's routes are mounted under (default
/openai/v1 and /v1), any list; `""` mounts them bare (`POST /responses`, ...). `/health`,
`/metrics`, `/llmsim/...` and the served document's path do not move."""
from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from websockets.asyncio.client import connect

import oai_schemas
from our_spec import check_error
from settingsload import load, write_config

HI = {"model": "gpt-4o", "input": "hi"}


@pytest.fixture(scope="module")
def bare_server(live_server_factory):
    """The API bare and under /v1 (flags)."""
    return live_server_factory("--profile", "instant", "--base-path", "", "--base-path", "/v1")


@pytest.fixture(scope="module")
def openai_only_server(live_server_factory):
    """The API under /openai/v1 alone (a YAML list in the environment)."""
    return live_server_factory("--profile", "instant", env={"LLMSIM_BASE_PATHS": "[/openai/v1]"})


@pytest.fixture(scope="module")
def bare_client(bare_server):
    return openai.OpenAI(base_url=bare_server.url, api_key="sk-test", max_retries=0)


# -- the bare aliases ----------------------------------------------------------------------

def test_post_responses_answers_without_a_prefix(bare_server):
    response = httpx.post(f"{bare_server.url}/responses", json=HI, timeout=30)
    assert response.status_code == 200 and response.json()["status"] == "completed"
    oai_schemas.validate("Response", response.json())


def test_get_a_stored_response_and_its_input_items_without_a_prefix(bare_server):
    created = httpx.post(f"{bare_server.url}/responses", json=HI, timeout=30).json()
    got = httpx.get(f"{bare_server.url}/responses/{created['id']}", timeout=30)
    assert got.status_code == 200 and got.json()["id"] == created["id"]
    items = httpx.get(f"{bare_server.url}/responses/{created['id']}/input_items", timeout=30)
    assert items.status_code == 200 and items.json()["object"] == "list"


def test_cancel_reaches_its_handler_without_a_prefix(bare_server):
    created = httpx.post(f"{bare_server.url}/responses", json=HI, timeout=30).json()
    refused = httpx.post(f"{bare_server.url}/responses/{created['id']}/cancel", timeout=30)
    assert check_error(refused, 400)["message"] == "Cannot cancel a synchronous response."


def test_the_sdk_cancels_a_background_response_bare(live_server_factory):
    server = live_server_factory("--ttft-ms", "5000", "--base-path", "")
    client = openai.OpenAI(base_url=server.url, api_key="sk-test", max_retries=0)
    created = client.responses.create(model="gpt-4o", input="hi", background=True)
    assert client.responses.cancel(created.id).status == "cancelled"
    assert client.responses.retrieve(created.id).status == "cancelled"


@pytest.mark.parametrize("method, path, body", [
    ("GET", "/models", None),
    ("GET", "/models/o3", None),
    ("POST", "/chat/completions", {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/conversations", {}),
    ("POST", "/responses/input_tokens", HI),
])
def test_the_rest_of_the_documents_routes_answer_bare(bare_server, method, path, body):
    response = httpx.request(method, f"{bare_server.url}{path}", json=body, timeout=30)
    assert response.status_code == 200, response.text


def test_the_prefixed_routes_still_answer_beside_the_bare_ones(bare_server):
    assert httpx.post(f"{bare_server.url}/v1/responses", json=HI, timeout=30).status_code == 200


def test_a_route_mounted_nowhere_is_404_in_the_envelope(bare_server):
    response = httpx.post(f"{bare_server.url}/openai/v1/responses", json=HI, timeout=30)
    error = check_error(response, 404)
    assert "/openai/v1/responses" in error["message"]


def test_the_sdk_works_with_a_base_url_without_v1(bare_client):
    response = bare_client.responses.create(model="o3", input="hi")
    assert response.status == "completed" and response.output_text
    assert bare_client.responses.retrieve(response.id).id == response.id
    with bare_client.responses.stream(model="gpt-4o", input="hi") as stream:
        assert stream.get_final_response().status == "completed"
    completion = bare_client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content
    assert "gpt-4o" in [model.id for model in bare_client.models.list()]


async def test_the_websocket_answers_bare(bare_server):
    async with connect(bare_server.url.replace("http://", "ws://") + "/responses") as ws:
        await ws.send(json.dumps({"type": "response.create", **HI}))
        while (event := json.loads(await asyncio.wait_for(ws.recv(), 10)))["type"] != "response.completed":
            assert event["type"] != "error", event


def test_llmsim_routes_and_health_do_not_move(bare_server):
    for path in ("/health", "/llmsim/stats", "/metrics"):
        assert httpx.get(f"{bare_server.url}{path}", timeout=30).status_code == 200, path


def test_the_document_is_served_under_its_prefixes_not_bare(bare_server):
    assert httpx.get(f"{bare_server.url}/v1/openapi.json", timeout=30).status_code == 200
    check_error(httpx.get(f"{bare_server.url}/openapi.json", timeout=30), 404)


def test_bare_requests_count_under_their_endpoint_in_stats(bare_server):
    before = httpx.get(f"{bare_server.url}/llmsim/stats").json()["endpoints"]["chat"]["requests"]
    httpx.post(f"{bare_server.url}/chat/completions", timeout=30,
               json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    after = httpx.get(f"{bare_server.url}/llmsim/stats").json()["endpoints"]["chat"]["requests"]
    assert after == before + 1


# -- a list without /v1 --------------------------------------------------------------------

@pytest.mark.parametrize("method, path", [("POST", "/v1/responses"), ("GET", "/v1/models"),
                                          ("POST", "/responses"), ("POST", "/v1/chat/completions")])
def test_v1_and_bare_paths_404_when_only_openai_v1_is_mounted(openai_only_server, method, path):
    response = httpx.request(method, f"{openai_only_server.url}{path}", timeout=30,
                             json=HI if method == "POST" else None)
    check_error(response, 404)


def test_openai_v1_answers_when_only_it_is_mounted(openai_only_server):
    client = openai.OpenAI(base_url=f"{openai_only_server.url}/openai/v1", api_key="sk-test", max_retries=0)
    assert client.responses.create(**HI).status == "completed"
    for path in ("/health", "/llmsim/stats", "/openai/v1/openapi.json"):
        assert httpx.get(f"{openai_only_server.url}{path}", timeout=30).status_code == 200, path


def test_the_plugins_server_gives_the_sdk_its_only_mount(openai_only_server):
    assert openai_only_server.openai_url == f"{openai_only_server.url}/openai/v1"
    assert httpx.get(f"{openai_only_server.url}/health", timeout=30).json()["base_paths"] == ["/openai/v1"]


# -- API keys and the setting --------------------------------------------------------------

async def test_api_keys_guard_the_bare_routes_but_not_llmsims(app_client):
    async with app_client(base_paths=["", "/v1"], api_keys=["k1"]) as http:
        assert (await http.post("/responses", json=HI)).status_code == 401
        assert (await http.post("/responses", json=HI, headers={"authorization": "Bearer k1"})).status_code == 200
        assert (await http.get("/health")).status_code == 200
        assert (await http.get("/llmsim/stats")).status_code == 200


@pytest.mark.parametrize("paths", [["v1"], ["/v1/"], [], ["/v1", "/v1"], "/v1"])
def test_bad_base_paths_are_refused_naming_the_key(tmp_path, paths):
    from llmsim.errors import ConfigError
    with pytest.raises(ConfigError, match="base_paths"):
        load(["--config", write_config(tmp_path, {"base_paths": paths})])


def test_base_paths_from_the_environment_as_a_yaml_list():
    assert list(load(environ={"LLMSIM_BASE_PATHS": '["", /v1]'}).base_paths) == ["", "/v1"]
