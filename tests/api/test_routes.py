"""Models, health, both URL prefixes and the served OpenAPI document, on the live server."""
from __future__ import annotations

import httpx
import openai
import pytest
import yaml

import oai_schemas
from our_spec import SPEC_PATH, check_error, check_exchange, validate

CATALOGUE = ["gpt-5", "gpt-5-mini", "gpt-5.1", "gpt-5.2", "o1", "o3", "o4-mini", "gpt-4.1", "gpt-4o",
             "gpt-4", "claude-opus-4-1", "claude-sonnet-4-5", "claude-haiku-4-5", "gemini-2.5-pro",
             "gemini-2.5-flash", "deepseek-chat", "deepseek-reasoner"]


def test_models_list_has_the_catalogue_in_openai_model_shape(server):
    response = httpx.get(f"{server.base}/models")
    check_exchange(response)
    body = response.json()
    assert body["object"] == "list"
    ids = [model["id"] for model in body["data"]]
    assert set(CATALOGUE) <= set(ids)
    for model in body["data"]:
        oai_schemas.validate("Model", model)


def test_sdk_lists_and_retrieves_models(client):
    ids = [model.id for model in client.models.list()]
    assert "gpt-4o" in ids
    model = client.models.retrieve("claude-sonnet-4-5")
    assert (model.id, model.object, model.owned_by) == ("claude-sonnet-4-5", "model", "anthropic")


def test_retrieve_one_model(server):
    response = httpx.get(f"{server.base}/models/o3")
    check_exchange(response)
    oai_schemas.validate("Model", response.json())
    assert response.json()["id"] == "o3"


def test_retrieve_unknown_model_is_404_model_not_found(server):
    response = httpx.get(f"{server.base}/models/gpt-99")
    check_exchange(response)
    error = check_error(response, 404)
    assert (error["code"], error["param"], error["type"]) == ("model_not_found", "model", "invalid_request_error")


def test_sdk_retrieve_unknown_model_raises_not_found(client):
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-99")


async def test_allow_any_model_answers_for_unknown_names(app_client):
    async with app_client(allow_any_model=True) as http:
        response = await http.post("/v1/responses", json={"model": "my-finetune", "input": "hi"})
    assert response.status_code == 200
    assert response.json()["model"] == "my-finetune"


def test_health(server):
    response = httpx.get(f"{server.url}/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


@pytest.mark.parametrize("prefix", ["/openai/v1", "/v1"])
def test_responses_answer_under_both_prefixes(server, prefix):
    response = httpx.post(f"{server.url}{prefix}/responses", json={"model": "gpt-4o", "input": "hi"})
    check_exchange(response)
    assert response.json()["status"] == "completed"


def test_models_are_the_same_under_both_prefixes(server):
    assert httpx.get(f"{server.url}/openai/v1/models").json() == httpx.get(f"{server.url}/v1/models").json()


def test_sdk_works_with_the_openai_v1_base_url(server):
    client = openai.OpenAI(base_url=f"{server.url}/openai/v1", api_key="sk-test", max_retries=0)
    assert client.responses.create(model="gpt-4o", input="hi").status == "completed"


def test_openapi_document_is_served(server):
    response = httpx.get(f"{server.url}/openai/v1/openapi.json")
    assert response.status_code == 200
    served = response.json()
    ours = yaml.safe_load(SPEC_PATH.read_text())
    assert served["openapi"] == ours["openapi"]
    assert set(served["paths"]) == set(ours["paths"])
    def fields(doc):
        return set(doc["components"]["schemas"]["CreateResponseRequest"]["properties"])
    assert fields(served) == fields(ours)


def test_our_document_describes_the_response_object(server):
    """The ResponseObject schema is not vacuous: a body missing `output` fails it."""
    body = httpx.post(f"{server.base}/responses", json={"model": "gpt-4o", "input": "hi"}).json()
    validate("ResponseObject", body)
    del body["output"]
    with pytest.raises(AssertionError):
        validate("ResponseObject", body)
