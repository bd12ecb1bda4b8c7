"""Other providers' APIs, one mechanism (llmsim.api.apis): any document in the OpenAPI
directory with an `x-llmsim` block is mounted on its servers; its apiKey securitySchemes say
where else a key may come, for its paths only; a request under a shared base path is moved to
the document's own base path by its header or by naming one of the document's paths."""
from __future__ import annotations

import pytest

from geminiwire import client_of
from llmsim.api.apis import Apis

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

KEY = "sk-apis"
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
CLAUDE = {"model": "claude-sonnet-4-5", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
GEMINI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}

MAIN = """\
openapi: 3.0.3
paths:
  /models/{model}: {}
"""
ACME = """\
openapi: 3.0.3
servers: [{url: /acme/v1}]
x-llmsim:
  errors: acme_errors
  header: acme-version
  shared: [/v1]
paths:
  /models/{id}: {}
  /things/{id}:run: {}
components:
  securitySchemes:
    Header: {type: apiKey, in: header, name: X-Acme-Key}
    Query: {type: apiKey, in: query, name: token}
    Bearer: {type: http, scheme: bearer}
"""


@pytest.fixture(scope="module")
def acme(tmp_path_factory) -> Apis:
    directory = tmp_path_factory.mktemp("openapi")
    (directory / "main.yaml").write_text(MAIN)
    (directory / "acme.yaml").write_text(ACME)
    (directory / "plain.yaml").write_text(MAIN)      # no x-llmsim block: not an API
    return Apis.load(directory, directory / "main.yaml")


def request(path: str, headers=(), query=b""):
    headers = [(k.encode(), v.encode()) for k, v in headers]
    return {"type": "http", "path": path, "raw_path": path.encode(), "query_string": query,
            "headers": headers}, dict(headers)


@pytest.fixture(scope="module")
def keyed():
    return client_of(api_keys=[KEY])


def test_a_document_is_found_by_its_x_llmsim_block(acme):
    assert [(doc.name, doc.own, doc.errors) for doc in acme.documents] == [("acme", ("/acme/v1",), "acme_errors")]


def test_a_path_only_the_document_has_is_moved_under_its_server(acme):
    scope, headers = request("/v1/things/t1:run")
    assert acme.claim(scope, headers)["path"] == "/acme/v1/things/t1:run"


def test_a_path_both_documents_have_is_moved_only_with_the_header(acme):
    assert acme.claim(*request("/v1/models/m"))["path"] == "/v1/models/m"
    assert acme.claim(*request("/v1/models/m", [("acme-version", "1")]))["path"] == "/acme/v1/models/m"


def test_keys_are_taken_where_the_apikey_schemes_say_and_only_there(acme):
    scope, headers = request("/acme/v1/things/t:run", [("x-acme-key", "a"), ("x-api-key", "b")], b"token=c")
    assert acme.of(scope["path"]).keys(scope, headers) == [b"a", b"c"]
    assert acme.of("/v1/models/m") is None          # the OpenAI document's


@pytest.mark.parametrize("path, body, header", [
    ("/v1/chat/completions", CHAT, "x-api-key"),                   # OpenAI's route: Bearer only
    ("/v1/chat/completions", CHAT, "x-goog-api-key"),
    ("/v1/messages", CLAUDE, "x-goog-api-key"),                    # Anthropic's: not Google's header
    ("/v1/models/gemini-2.5-flash:generateContent", GEMINI, "x-api-key"),   # Gemini's: not Anthropic's
])
def test_a_key_in_another_apis_place_does_not_open_a_route(keyed, path, body, header):
    assert keyed.post(path, json=body, headers={header: KEY}).status_code == 401


@pytest.mark.parametrize("path, body, auth", [
    ("/v1/messages", CLAUDE, {"headers": {"x-api-key": KEY}}),
    ("/v1/models/gemini-2.5-flash:generateContent", GEMINI, {"params": {"key": KEY}}),
    ("/v1/models/gemini-2.5-flash:generateContent", GEMINI, {"headers": {"x-goog-api-key": KEY}}),
])
def test_a_key_in_the_places_of_the_routes_api_opens_it_under_v1(keyed, path, body, auth):
    assert keyed.post(path, json=body, **auth).status_code == 200


def test_each_document_is_served_on_its_own_base_path(keyed):
    served = {base: keyed.get(f"{base}/openapi.json", headers={"authorization": f"Bearer {KEY}"}).json()["info"]["title"]
              for base in ("/v1", "/anthropic/v1", "/v1beta")}
    assert "Anthropic" in served["/anthropic/v1"] and "Gemini" in served["/v1beta"]
    assert "Anthropic" not in served["/v1"] and "Gemini" not in served["/v1"]
