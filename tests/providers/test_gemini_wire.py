"""The Gemini API on the wire, in-process (one app per settings): both URL prefixes, both
spellings of request fields, Google's error envelope for every kind of error, API keys in
`x-goog-api-key` or `key`, mid-stream faults, stats and --seed."""
from __future__ import annotations

import pytest

import gemini_schemas
from geminiwire import HELLO, MODEL, chunks, client_of, generate

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

KEY = "gk-wire"


@pytest.fixture(scope="module")
def gemini_client():
    return client_of()


@pytest.fixture(scope="module")
def keyed():
    return client_of(api_keys=[KEY])


def check_error(response, code: int, status: str) -> dict:
    assert response.status_code == code
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    gemini_schemas.validate("GoogleError", body)
    assert (body["error"]["code"], body["error"]["status"]) == (code, status)
    return body["error"]


@pytest.mark.parametrize("prefix", ["/v1beta", "/v1"])
def test_both_prefixes_answer(gemini_client, prefix):
    response = generate(gemini_client, prefix=prefix)
    assert response.status_code == 200
    gemini_schemas.validate("GenerateContentResponse", response.json())


def test_snake_case_fields_work_as_camel_case_ones(gemini_client):
    snake = {**HELLO, "generation_config": {"max_output_tokens": 2, "thinking_config": {"thinking_budget": 0}},
             "system_instruction": {"parts": [{"text": "Be brief."}]}}
    camel = {**HELLO, "generationConfig": {"maxOutputTokens": 2, "thinkingConfig": {"thinkingBudget": 0}},
             "systemInstruction": {"parts": [{"text": "Be brief."}]}}
    a, b = generate(gemini_client, snake).json(), generate(gemini_client, camel).json()
    assert a["candidates"][0]["finishReason"] == b["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert a["usageMetadata"] == b["usageMetadata"]
    assert "thoughtsTokenCount" not in a["usageMetadata"]


def test_snake_case_function_declarations_are_called(gemini_client):
    body = {**HELLO, "tools": [{"function_declarations": [{"name": "lookup", "parameters": {
                "type": "OBJECT", "properties": {"query_text": {"type": "STRING"}}, "required": ["query_text"]}}]}],
            "tool_config": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["lookup"]}}}
    part = generate(gemini_client, body).json()["candidates"][0]["content"]["parts"][0]
    assert part["functionCall"]["name"] == "lookup"
    assert isinstance(part["functionCall"]["args"]["query_text"], str)     # the client's own key, kept


def test_thinking_level_sets_the_effort(gemini_client):
    def thoughts(level):
        body = {**HELLO, "generationConfig": {"thinkingConfig": {"thinkingLevel": level}}}
        usage = generate(gemini_client, body).json()["usageMetadata"]
        return usage["thoughtsTokenCount"] / usage["candidatesTokenCount"]
    assert thoughts("LOW") < thoughts("HIGH")


def test_thoughts_spend_max_output_tokens_first(gemini_client):
    body = {**HELLO, "generationConfig": {"maxOutputTokens": 5}}
    answer = generate(gemini_client, body).json()
    assert answer["usageMetadata"]["thoughtsTokenCount"] == 5
    assert answer["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert "parts" not in answer["candidates"][0]["content"]


def test_candidate_count_gives_that_many_candidates(gemini_client):
    body = {**HELLO, "generationConfig": {"candidateCount": 3}}
    assert [c["index"] for c in generate(gemini_client, body).json()["candidates"]] == [0, 1, 2]


def test_stream_chunks_then_a_finish_chunk_with_usage(gemini_client):
    response = generate(gemini_client, method="streamGenerateContent", params={"alt": "sse"})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = chunks(response)
    for event in events:
        gemini_schemas.validate("GenerateContentResponse", event)
    assert all("usageMetadata" not in e for e in events[:-1])
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    pieces = [p["text"] for e in events for p in e["candidates"][0]["content"].get("parts", ())]
    assert len(pieces) == events[-1]["usageMetadata"]["candidatesTokenCount"] == 12    # target_tokens


def test_stream_without_alt_sse_is_invalid_argument(gemini_client):
    check_error(generate(gemini_client, method="streamGenerateContent"), 400, "INVALID_ARGUMENT")


def test_a_mid_stream_fault_ends_the_stream_with_an_error_event(gemini_client):
    response = generate(gemini_client, method="streamGenerateContent", params={"alt": "sse"},
                        headers={"x-llmsim-fault": "server_error;after_tokens=2"})
    events = chunks(response)
    assert len(events) == 3
    gemini_schemas.validate("GoogleError", events[-1])
    assert events[-1]["error"]["status"] == "INTERNAL"


def test_a_content_filter_fault_finishes_with_safety(gemini_client):
    response = generate(gemini_client, headers={"x-llmsim-fault": "content_filter;after_tokens=2"}).json()
    assert response["candidates"][0]["finishReason"] == "SAFETY"
    assert response["usageMetadata"]["candidatesTokenCount"] == 2


@pytest.mark.parametrize("body, where", [
    ({}, "contents"), ({"contents": []}, "contents"),
    ({**HELLO, "generationConfig": {"candidateCount": 99}}, "candidateCount"),
    ({**HELLO, "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}}, "mode"),
])
def test_invalid_requests_get_invalid_argument(gemini_client, body, where):
    assert where in check_error(generate(gemini_client, body), 400, "INVALID_ARGUMENT")["message"]


def test_invalid_json_gets_invalid_argument(gemini_client):
    response = gemini_client.post(f"/v1beta/models/{MODEL}:generateContent", content=b"{nope",
                        headers={"content-type": "application/json"})
    check_error(response, 400, "INVALID_ARGUMENT")


def test_unknown_model_and_unknown_route_are_not_found(gemini_client):
    check_error(gemini_client.post("/v1beta/models/gemini-0:generateContent", json=HELLO), 404, "NOT_FOUND")
    check_error(gemini_client.post(f"/v1beta/models/{MODEL}:embedEverything", json=HELLO), 404, "NOT_FOUND")


def test_openai_routes_keep_openais_envelope(gemini_client):
    body = gemini_client.post("/v1/chat/completions", json={}).json()
    assert body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("auth", [{"headers": {"x-goog-api-key": KEY}}, {"params": {"key": KEY}},
                                  {"headers": {"authorization": f"Bearer {KEY}"}}])
def test_an_api_key_in_any_of_googles_places_is_accepted(keyed, auth):
    assert generate(keyed, **auth).status_code == 200


@pytest.mark.parametrize("auth", [{}, {"headers": {"x-goog-api-key": "wrong"}}, {"params": {"key": "wrong"}}])
def test_a_missing_or_wrong_key_is_unauthenticated(keyed, auth):
    check_error(generate(keyed, **auth), 401, "UNAUTHENTICATED")


def test_a_wrong_key_is_called_not_valid_naming_googles_places_for_it(keyed):
    error = check_error(generate(keyed, headers={"x-goog-api-key": "gk-wrong-key-1234"}), 401, "UNAUTHENTICATED")
    assert error["message"].startswith("API key not valid.")
    assert "x-goog-api-key" in error["message"] and "?key=" in error["message"]
    assert "Bearer" not in error["message"] and "gk-wrong" not in error["message"]


def test_a_missing_key_names_googles_places_for_it(keyed):
    error = check_error(generate(keyed), 401, "UNAUTHENTICATED")
    assert "x-goog-api-key" in error["message"] and "?key=" in error["message"] and "Bearer" not in error["message"]


def test_googles_key_places_do_not_open_openai_routes(keyed):
    response = keyed.post("/v1/chat/completions", headers={"x-goog-api-key": KEY},
                          json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 401


def test_stats_count_gemini_requests_and_tokens(gemini_client):
    before = gemini_client.get("/llmsim/stats").json()
    usage = generate(gemini_client).json()["usageMetadata"]
    after = gemini_client.get("/llmsim/stats").json()
    old = before["endpoints"].get("gemini", {"requests": 0})
    assert after["endpoints"]["gemini"]["requests"] - old["requests"] == 1
    model_before = before["models"].get(MODEL, {}).get("prompt_tokens", 0)
    assert after["models"][MODEL]["prompt_tokens"] - model_before == usage["promptTokenCount"]


def test_seed_makes_answers_reproducible():
    first, second = client_of(seed=11), client_of(seed=11)
    body = {**HELLO, "tools": [{"functionDeclarations": [{"name": "f", "parameters": {
        "type": "OBJECT", "properties": {"n": {"type": "INTEGER"}}, "required": ["n"]}}]}]}
    for _ in range(3):
        assert generate(first, body).content == generate(second, body).content
