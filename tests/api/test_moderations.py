"""POST /v1/moderations through the openai SDK against a live server: the word list
(data/moderation.yaml) flags plainly violent and self-harm text, every category comes with a
score and its applied input types, results are deterministic, and `--data DIR` replaces the
list."""
from __future__ import annotations

import httpx
import openai
import pytest
import yaml

import oai_schemas
from conftest import LiveServer
from llmsim.app import create_app
from llmsim.errors import ConfigError
from llmsim.settings import Settings

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

CATEGORIES = {"harassment", "harassment/threatening", "hate", "hate/threatening", "illicit",
              "illicit/violent", "self-harm", "self-harm/intent", "self-harm/instructions", "sexual",
              "sexual/minors", "violence", "violence/graphic"}


@pytest.fixture(scope="module")
def server():
    live = LiveServer("--profile", "instant")
    yield live
    live.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def test_plainly_violent_text_is_flagged_as_violence(client):
    [result] = client.moderations.create(input="They planned to kill him with a bomb").results
    assert result.flagged and result.categories.violence
    assert result.category_scores.violence >= 0.5
    assert not result.categories.sexual and result.category_scores.sexual < 0.01


def test_self_harm_text_is_flagged_as_self_harm(client):
    [result] = client.moderations.create(input="Sometimes I want to hurt myself").results
    assert result.flagged and result.categories.self_harm and result.categories.self_harm_intent


def test_harmless_text_is_not_flagged(client):
    [result] = client.moderations.create(input="The weather is lovely for a picnic").results
    assert not result.flagged
    assert max(result.category_scores.model_dump().values()) < 0.01


def test_each_string_of_a_list_gets_its_own_result(client):
    done = client.moderations.create(input=["a bomb went off", "a quiet afternoon"])
    assert [r.flagged for r in done.results] == [True, False]
    assert done.id.startswith("modr-") and done.model == "omni-moderation-latest"


def test_the_same_input_gets_the_same_scores(client):
    first = client.moderations.create(input="a calm lake").results[0].category_scores
    second = client.moderations.create(input="a calm lake").results[0].category_scores
    assert first == second


def test_every_category_has_a_flag_a_score_and_input_types(server):
    body = httpx.post(f"{server.base}/moderations", json={"input": "shoot", "model": "text-moderation-latest"}).json()
    oai_schemas.validate("CreateModerationResponse", body)
    [result] = body["results"]
    assert set(result["categories"]) == set(result["category_scores"]) == CATEGORIES
    assert set(result["category_applied_input_types"]) == CATEGORIES
    assert body["model"] == "text-moderation-latest"


def test_an_image_applies_to_the_categories_that_read_images(client):
    done = client.moderations.create(input=[{"type": "text", "text": "hello"},
                                            {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}])
    [result] = done.results
    applied = result.category_applied_input_types
    assert applied.violence == ["text", "image"] and applied.hate == ["text"]


def test_a_text_only_model_refuses_images(client):
    with pytest.raises(openai.BadRequestError):
        client.moderations.create(model="text-moderation-latest", input=[
            {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}])


def test_an_unknown_model_is_a_404(client):
    with pytest.raises(openai.NotFoundError):
        client.moderations.create(model="moderation-9", input="x")


def test_a_fault_header_gives_its_error(client):
    with pytest.raises(openai.InternalServerError):
        client.moderations.create(input="x", extra_headers={"x-llmsim-fault": "server_error"})


def test_stats_count_moderations_requests(server, client):
    def count():
        return httpx.get(f"{server.url}/llmsim/stats").json()["endpoints"].get("moderations", {}).get("requests", 0)
    before = count()
    client.moderations.create(input="counted")
    assert count() == before + 1


async def test_a_data_dir_word_list_replaces_the_default(tmp_path):
    (tmp_path / "moderation.yaml").write_text(yaml.safe_dump(
        {"models": {"house-moderation": {"images": False}}, "categories": {"hate": {"terms": ["pineapple pizza"]}}}))
    app = create_app(Settings(profile="instant", data=str(tmp_path)))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim/v1")
    client = openai.AsyncOpenAI(base_url="http://sim/v1", api_key="sk-test", http_client=http)
    done = await client.moderations.create(input=["I love pineapple pizza", "kill the bomb"])
    assert [r.flagged for r in done.results] == [True, False]
    assert done.results[0].categories.hate and done.model == "house-moderation"


def test_a_bad_word_list_stops_start_up_naming_the_file(tmp_path):
    (tmp_path / "moderation.yaml").write_text(yaml.safe_dump({"models": {"m": {}}, "categories": {"hate": {"words": ["x"]}}}))
    with pytest.raises(ConfigError, match="moderation.yaml"):
        create_app(Settings(profile="instant", data=str(tmp_path)))


def test_metrics_count_moderations_requests(server, client):
    client.moderations.create(input="metered")
    text = httpx.get(f"{server.url}/metrics").text
    assert any(line.startswith('llmsim_requests_total{endpoint="moderations"}') for line in text.splitlines())
