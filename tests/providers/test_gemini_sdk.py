"""The Gemini API through Google's official SDK (google-genai) against one live server: every
body and stream chunk is also validated against Google's shapes (tests/gemini_schemas.py)."""
from __future__ import annotations

import httpx
import pytest
from google import genai
from google.genai import errors, types

import gemini_schemas

KEY = "gk-test"
MODEL = "gemini-2.5-flash"


@pytest.fixture(scope="module")
def server(live_server_factory):
    return live_server_factory("--profile", "instant", "--api-key", KEY)


@pytest.fixture(scope="module")
def wire(server):
    """Every Gemini response body the SDK read, parsed (SSE: each event's data)."""
    return []


@pytest.fixture(scope="module")
def client(server, wire):
    def keep(response: httpx.Response):
        if "/models/" in response.url.path:
            response.read()
            wire.append((response.url.path, response.headers.get("content-type", ""), response.text))
    options = types.HttpOptions(base_url=server.url, client_args={"event_hooks": {"response": [keep]}})
    return genai.Client(api_key=KEY, http_options=options)


def weather_tool() -> types.Tool:
    return types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", description="The weather in a city.",
        parameters=types.Schema(type="OBJECT", required=["city", "days"], properties={
            "city": types.Schema(type="STRING"),
            "days": types.Schema(type="INTEGER", minimum=1, maximum=7)}))])


def test_generate_content_answers_in_text(client):
    response = client.models.generate_content(model=MODEL, contents="Say something.")
    assert response.text
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    assert response.model_version == MODEL


def test_usage_metadata_adds_up(client):
    usage = client.models.generate_content(model=MODEL, contents="Say something.").usage_metadata
    assert usage.prompt_token_count > 0 and usage.candidates_token_count > 0
    assert usage.total_token_count == (usage.prompt_token_count + usage.candidates_token_count
                                       + (usage.thoughts_token_count or 0))


def test_count_tokens_equals_the_prompt_count_of_generate_content(client):
    contents = "How many tokens are in this sentence?"
    counted = client.models.count_tokens(model=MODEL, contents=contents).total_tokens
    usage = client.models.generate_content(model=MODEL, contents=contents).usage_metadata
    assert counted == usage.prompt_token_count


def test_stream_sends_the_text_token_by_token_then_finishes_with_usage(client):
    chunks = list(client.models.generate_content_stream(model=MODEL, contents="Say something."))
    texts = [c.text for c in chunks if c.candidates[0].content.parts]
    assert len(texts) > 1
    last = chunks[-1]
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata.candidates_token_count == len(texts)


def test_function_declaration_gives_a_function_call_part_with_args_from_its_schema(client):
    config = types.GenerateContentConfig(tools=[weather_tool()], tool_config=types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(mode="ANY")))
    response = client.models.generate_content(model=MODEL, contents="Weather in Paris?", config=config)
    (call,) = response.function_calls
    assert call.name == "get_weather"
    assert isinstance(call.args["city"], str) and 1 <= call.args["days"] <= 7


def test_a_function_response_is_answered_in_text(client):
    contents = [
        types.Content(role="user", parts=[types.Part(text="Weather in Paris?")]),
        types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
            name="get_weather", args={"city": "Paris", "days": 1}))]),
        types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
            name="get_weather", response={"forecast": "sunny"}))]),
    ]
    config = types.GenerateContentConfig(tools=[weather_tool()])
    response = client.models.generate_content(model=MODEL, contents=contents, config=config)
    assert response.text and not response.function_calls


def test_thinking_budget_caps_thoughts_token_count(client):
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(thinking_budget=7))
    usage = client.models.generate_content(model=MODEL, contents="Think.", config=config).usage_metadata
    assert usage.thoughts_token_count == 7


def test_thinking_budget_zero_turns_thinking_off(client):
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(thinking_budget=0))
    usage = client.models.generate_content(model=MODEL, contents="Think.", config=config).usage_metadata
    assert usage.thoughts_token_count is None


def test_include_thoughts_adds_a_thought_part_before_the_answer(client):
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=True))
    parts = client.models.generate_content(model=MODEL, contents="Think.", config=config).candidates[0].content.parts
    assert parts[0].thought is True and parts[0].text
    assert not parts[-1].thought and parts[-1].text


def test_max_output_tokens_stops_with_max_tokens(client):
    config = types.GenerateContentConfig(max_output_tokens=3, thinking_config=types.ThinkingConfig(thinking_budget=0))
    response = client.models.generate_content(model=MODEL, contents="Say a lot.", config=config)
    assert response.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert response.usage_metadata.candidates_token_count == 3


def test_stop_sequences_cut_the_text_before_them(client):
    config = types.GenerateContentConfig(stop_sequences=["dolor"])
    response = client.models.generate_content(model=MODEL, contents="Say something.", config=config)
    assert "dolor" not in response.text and response.text


@pytest.mark.parametrize("fault, code, status", [
    ("rate_limit", 429, "RESOURCE_EXHAUSTED"), ("server_error", 500, "INTERNAL"),
    ("service_unavailable", 503, "UNAVAILABLE")])
def test_a_fault_raises_the_sdk_error_in_googles_envelope(client, fault, code, status):
    config = types.GenerateContentConfig(http_options=types.HttpOptions(
        headers={"x-llmsim-fault": fault}, retry_options=types.HttpRetryOptions(attempts=1)))
    with pytest.raises(errors.APIError) as caught:
        client.models.generate_content(model=MODEL, contents="Hi.", config=config)
    assert (caught.value.code, caught.value.status) == (code, status)


def test_an_unknown_model_is_a_client_error_not_found(client):
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model="gemini-0-nonexistent", contents="Hi.")
    assert (caught.value.code, caught.value.status) == (404, "NOT_FOUND")


def test_every_body_and_chunk_matches_googles_shapes(client, wire):
    assert wire, "the tests above ran first and recorded the wire"
    import json
    seen = set()
    for path, content_type, text in wire:
        if "text/event-stream" in content_type:
            for line in text.splitlines():
                if line.startswith("data: "):
                    gemini_schemas.validate("GenerateContentResponse", json.loads(line[6:]))
                    seen.add("chunk")
        elif path.endswith(":countTokens"):
            gemini_schemas.validate("CountTokensResponse", json.loads(text))
            seen.add("count")
        else:
            body = json.loads(text)
            gemini_schemas.validate("GoogleError" if "error" in body else "GenerateContentResponse", body)
            seen.add("error" if "error" in body else "body")
    assert seen == {"chunk", "count", "body", "error"}
