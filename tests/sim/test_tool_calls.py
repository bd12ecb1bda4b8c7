"""Tool calls through the official SDK, in Chat Completions and in the Responses API:
tool_choice none/auto/required/named, arguments that validate against the function's
parameters schema, parallel calls, streaming deltas, agent loops and errors."""
from __future__ import annotations

import json
import re

import httpx
import jsonschema
import openai
import pytest

import oai_schemas
import sse
from our_spec import check_events, check_exchange, check_response_body, validate

WEATHER_PARAMS = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City and country"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 10},
        "date": {"type": "string", "format": "date"},
        "include": {"type": "array", "items": {"type": "string", "enum": ["wind", "rain", "uv"]},
                    "minItems": 1, "uniqueItems": True},
        "coords": {"type": "object", "properties": {
            "lat": {"type": "number", "minimum": -90, "maximum": 90},
            "lon": {"type": "number", "minimum": -180, "maximum": 180}},
            "required": ["lat", "lon"], "additionalProperties": False},
        "station": {"type": "string", "pattern": "^[A-Z]{4}$"},
    },
    "required": ["location", "unit", "days", "coords", "station"],
    "additionalProperties": False,
}
TIME_PARAMS = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}
NOTE_PARAMS = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 40},
                                                 "tags": {"type": "array", "items": {"type": "string"}}},
               "required": ["text"]}
PARAMS = {"get_weather": WEATHER_PARAMS, "get_time": TIME_PARAMS, "save_note": NOTE_PARAMS}
CHAT_TOOLS = [{"type": "function", "function": {"name": name, "description": f"{name} tool",
                                                "parameters": params}} for name, params in PARAMS.items()]
RESPONSES_TOOLS = [{"type": "function", "name": name, "parameters": params, "strict": False}
                   for name, params in PARAMS.items()]
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


def check_call(name: str, arguments: str) -> dict:
    """The arguments are a JSON object valid against the function's parameters schema."""
    value = json.loads(arguments)
    jsonschema.validate(value, PARAMS[name], format_checker=jsonschema.FormatChecker())
    return value


def chat_raw(client, **params):
    raw = client.chat.completions.with_raw_response.create(**params)
    check_exchange(raw.http_response)
    body = raw.http_response.json()
    oai_schemas.validate_chat_completion(body)
    return raw.parse(), body


def responses_raw(client, **params):
    raw = client.responses.with_raw_response.create(**params)
    check_exchange(raw.http_response)
    body = raw.http_response.json()
    check_response_body(body)
    return raw.parse(), body


def sdk_over(app_client, **settings) -> openai.AsyncOpenAI:
    """The official async SDK talking to an in-process app with these settings."""
    return openai.AsyncOpenAI(base_url="http://sim/v1", api_key="sk-test", max_retries=0,
                              http_client=app_client(**settings))


# ---- Chat Completions ----------------------------------------------------------------------
def test_required_returns_tool_calls_whose_arguments_validate(client):
    for _ in range(10):
        completion, body = chat_raw(client, model="gpt-4o", messages=ASK, tools=CHAT_TOOLS,
                                    tool_choice="required")
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        assert 1 <= len(choice.message.tool_calls) <= 3
        for call in choice.message.tool_calls:
            assert re.fullmatch(r"call_[0-9a-f]+", call.id) and call.type == "function"
            check_call(call.function.name, call.function.arguments)
        assert completion.usage.completion_tokens > 0


def test_a_named_function_is_the_one_called(client):
    completion, _ = chat_raw(client, model="gpt-4o", messages=ASK, tools=CHAT_TOOLS,
                             tool_choice={"type": "function", "function": {"name": "get_time"}})
    [call] = completion.choices[0].message.tool_calls
    assert call.function.name == "get_time"
    check_call("get_time", call.function.arguments)


def test_allowed_tools_may_list_a_custom_tool_beside_the_functions_it_allows(client):
    shell = {"type": "custom", "custom": {"name": "shell"}}
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "get_time"}}, shell]}}
    completion, _ = chat_raw(client, model="gpt-4o", messages=ASK, tools=[*CHAT_TOOLS, shell], tool_choice=allowed)
    calls = completion.choices[0].message.tool_calls
    assert calls and {call.function.name for call in calls} == {"get_time"}


def test_parallel_tool_calls_false_gives_exactly_one_call(client):
    for _ in range(8):
        completion, _ = chat_raw(client, model="gpt-4o", messages=ASK, tools=CHAT_TOOLS,
                                 tool_choice="required", parallel_tool_calls=False)
        assert len(completion.choices[0].message.tool_calls) == 1


def test_parallel_calls_name_distinct_functions(client):
    counts = set()
    for _ in range(30):
        completion, _ = chat_raw(client, model="gpt-4o", messages=ASK, tools=CHAT_TOOLS,
                                 tool_choice="required")
        names = [c.function.name for c in completion.choices[0].message.tool_calls]
        assert len(set(names)) == len(names)
        assert len({c.id for c in completion.choices[0].message.tool_calls}) == len(names)
        counts.add(len(names))
    assert max(counts) > 1


def test_tool_choice_none_answers_in_text(client):
    completion, _ = chat_raw(client, model="gpt-4o", messages=ASK, tools=CHAT_TOOLS, tool_choice="none")
    assert completion.choices[0].message.content and completion.choices[0].message.tool_calls is None
    assert completion.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("probability, calls", [(1.0, True), (0.0, False)])
async def test_auto_calls_a_tool_with_the_configured_probability(app_client, probability, calls):
    sdk = sdk_over(app_client, tool_call_probability=probability)
    for _ in range(5):
        completion = await sdk.chat.completions.create(model="gpt-4o", messages=ASK, tools=CHAT_TOOLS)
        assert (completion.choices[0].finish_reason == "tool_calls") is calls
        assert (completion.choices[0].message.tool_calls is not None) is calls


async def test_each_of_n_choices_decides_on_its_own(app_client):
    sdk = sdk_over(app_client, tool_call_probability=0.5, seed=1)
    kinds = set()
    for _ in range(5):
        completion = await sdk.chat.completions.create(model="gpt-4o", messages=ASK, tools=CHAT_TOOLS, n=4)
        kinds |= {c.finish_reason for c in completion.choices}
    assert kinds == {"stop", "tool_calls"}


def test_agent_loop_ends_with_a_text_answer(client):
    messages = list(ASK)
    first, _ = chat_raw(client, model="gpt-4o", messages=messages, tools=CHAT_TOOLS, tool_choice="required")
    message = first.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 18}'})
    second, _ = chat_raw(client, model="gpt-4o", messages=messages, tools=CHAT_TOOLS)  # auto
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content
    assert second.usage.prompt_tokens > first.usage.prompt_tokens


def test_streamed_tool_calls_reassemble_into_valid_arguments(client):
    for _ in range(5):
        calls: dict[int, dict] = {}
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=ASK, tools=CHAT_TOOLS,
                                                      tool_choice="required", stream=True))
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[0].choices[0].delta.content is None
        for chunk in chunks:
            for delta in chunk.choices[0].delta.tool_calls or ():
                if delta.index not in calls:  # the first delta of a call names it
                    assert delta.id.startswith("call_") and delta.type == "function"
                    assert delta.function.name and delta.function.arguments == ""
                    calls[delta.index] = {"name": delta.function.name, "arguments": "", "fragments": 0}
                else:
                    assert delta.id is None and delta.function.name is None
                    calls[delta.index]["arguments"] += delta.function.arguments
                    calls[delta.index]["fragments"] += 1
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        assert sorted(calls) == list(range(len(calls)))
        for call in calls.values():
            assert call["fragments"] > 1
            check_call(call["name"], call["arguments"])


def test_raw_tool_call_stream_chunks_are_schema_valid(server):
    r = httpx.post(f"{server.base}/chat/completions", timeout=30, json={
        "model": "gpt-4o", "messages": ASK, "tools": CHAT_TOOLS, "tool_choice": "required",
        "stream": True, "stream_options": {"include_usage": True}})
    events = sse.parse(r.text)
    assert events[-1][1] == "[DONE]"
    for _, chunk in events[:-1]:
        oai_schemas.validate_chat_chunk(chunk)
        validate("ChatCompletionObject", chunk)
    assert events[-2][1]["usage"]["completion_tokens"] > 0


def test_the_sdk_stream_helper_assembles_the_final_tool_calls(client):
    with client.chat.completions.stream(model="gpt-4o", messages=ASK, tools=CHAT_TOOLS,
                                        tool_choice={"type": "function", "function": {"name": "get_weather"}}
                                        ) as stream:
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    check_call("get_weather", call.function.arguments)


def test_a_token_cap_cuts_a_tool_call_with_finish_reason_length(client):
    completion, _ = chat_raw(client, model="gpt-4o", messages=ASK, tools=CHAT_TOOLS, max_tokens=6,
                             tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens <= 6


def test_a_reasoning_model_reasons_before_calling(client):
    completion, _ = chat_raw(client, model="o3", messages=ASK, tools=CHAT_TOOLS, tool_choice="required",
                             reasoning_effort="high")
    details = completion.usage.completion_tokens_details
    assert details.reasoning_tokens == 6 * completion.usage.completion_tokens


@pytest.mark.parametrize("params, param", [
    ({"tools": CHAT_TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": CHAT_TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
])
def test_bad_tool_requests_are_400s_naming_the_param(client, params, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-4o", messages=ASK, **params)
    assert info.value.status_code == 400 and info.value.param == param


async def test_same_seed_gives_the_same_arguments(app_client):
    async def arguments(seed):
        sdk = sdk_over(app_client, seed=seed)
        completion = await sdk.chat.completions.create(model="gpt-4o", messages=ASK, tools=CHAT_TOOLS,
                                                       tool_choice="required")
        return [(c.id, c.function.name, c.function.arguments) for c in completion.choices[0].message.tool_calls]
    assert await arguments(3) == await arguments(3)
    assert await arguments(3) != await arguments(4)


# ---- Responses API --------------------------------------------------------------------------
def test_responses_required_gives_function_call_items(client):
    for _ in range(5):
        response, body = responses_raw(client, model="gpt-4o", input="Weather in Paris?",
                                       tools=RESPONSES_TOOLS, tool_choice="required")
        calls = [item for item in body["output"] if item["type"] == "function_call"]
        assert calls and len(calls) == len(body["output"]) <= 3
        for item in calls:
            assert re.fullmatch(r"fc_[0-9a-f]+", item["id"])
            assert re.fullmatch(r"call_[0-9a-f]+", item["call_id"])
            assert item["status"] == "completed"
            check_call(item["name"], item["arguments"])
        assert response.status == "completed"
        assert body["usage"]["output_tokens"] > 0


def test_responses_named_function_and_no_parallel_calls(client):
    _, body = responses_raw(client, model="gpt-4o", input="hi", tools=RESPONSES_TOOLS,
                            tool_choice={"type": "function", "name": "save_note"})
    [item] = body["output"]
    assert item["name"] == "save_note"
    check_call("save_note", item["arguments"])
    for _ in range(5):
        _, body = responses_raw(client, model="gpt-4o", input="hi", tools=RESPONSES_TOOLS,
                                tool_choice="required", parallel_tool_calls=False)
        assert len(body["output"]) == 1


def test_responses_reasoning_model_puts_reasoning_before_the_calls(client):
    _, body = responses_raw(client, model="o3", input="hi", tools=RESPONSES_TOOLS, tool_choice="required")
    kinds = [item["type"] for item in body["output"]]
    assert kinds[0] == "reasoning" and set(kinds[1:]) == {"function_call"}


def test_responses_stream_emits_the_function_call_events(client, server):
    with client.responses.stream(model="gpt-4o", input="Weather?", tools=RESPONSES_TOOLS,
                                 tool_choice={"type": "function", "name": "get_weather"}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    start = kinds.index("response.output_item.added")
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert kinds[start:] == (["response.output_item.added"] + ["response.function_call_arguments.delta"]
                             * len(deltas) + ["response.function_call_arguments.done",
                                              "response.output_item.done", "response.completed"])
    assert len(deltas) > 1 and "".join(d.delta for d in deltas) == done.arguments
    assert done.name == "get_weather"
    [item] = final.output
    assert item.type == "function_call" and item.arguments == done.arguments
    assert events[start].item.status == "in_progress" and events[start].item.arguments == ""
    check_call("get_weather", item.arguments)


def test_responses_raw_stream_events_are_schema_valid_for_parallel_calls(server):
    for _ in range(10):
        r = httpx.post(f"{server.base}/responses", timeout=30, json={
            "model": "gpt-4o", "input": "hi", "tools": RESPONSES_TOOLS, "tool_choice": "required",
            "stream": True})
        events = sse.parse(r.text)
        check_events(events)
        added = [d for _, d in events if d["type"] == "response.output_item.added"]
        done = [d for _, d in events if d["type"] == "response.output_item.done"]
        assert [d["output_index"] for d in added] == [d["output_index"] for d in done]
        if len(added) > 1:
            break
    else:
        pytest.fail("no parallel calls in 10 responses")
    # each call's events are contiguous: added, its deltas, arguments.done, item.done
    order = [(d["type"], d.get("output_index")) for _, d in events
             if d["type"].startswith(("response.output_item", "response.function_call"))]
    indexes = [i for _, i in order]
    assert indexes == sorted(indexes)


def test_responses_agent_loop_call_then_output_then_answer(client):
    first = client.responses.create(model="gpt-4o", input="Weather in Paris?", tools=RESPONSES_TOOLS,
                                    tool_choice="required")
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls
    conversation = [{"role": "user", "content": "Weather in Paris?"}]
    conversation += [item.model_dump(exclude_none=True) for item in calls]
    conversation += [{"type": "function_call_output", "call_id": c.call_id, "output": '{"temp": 18}'}
                     for c in calls]
    second, body = responses_raw(client, model="gpt-4o", input=conversation, tools=RESPONSES_TOOLS)
    assert second.output_text
    assert [item["type"] for item in body["output"]] == ["message"]
    assert second.usage.input_tokens > first.usage.input_tokens


def test_responses_agent_loop_through_previous_response_id(client):
    first = client.responses.create(model="gpt-4o", input="Weather in Paris?", tools=RESPONSES_TOOLS,
                                    tool_choice="required", parallel_tool_calls=False)
    [call] = first.output
    second = client.responses.create(model="gpt-4o", previous_response_id=first.id, tools=RESPONSES_TOOLS,
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": '{"temp": 18}'}])
    assert [item.type for item in second.output] == ["message"] and second.output_text
    assert second.usage.input_tokens > first.usage.input_tokens


def test_responses_stream_agent_loop(client):
    with client.responses.stream(model="gpt-4o", input="Time?", tools=RESPONSES_TOOLS,
                                 tool_choice="required", parallel_tool_calls=False) as stream:
        first = stream.get_final_response()
    [call] = first.output
    follow_up = [{"role": "user", "content": "Time?"}, call.model_dump(exclude_none=True),
                 {"type": "function_call_output", "call_id": call.call_id, "output": "noon"}]
    with client.responses.stream(model="gpt-4o", input=follow_up, tools=RESPONSES_TOOLS) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text and final.output_text == text


def test_responses_token_cap_cuts_the_call_and_marks_it_incomplete(client):
    response, body = responses_raw(client, model="gpt-4o", input="hi", tools=RESPONSES_TOOLS,
                                   tool_choice={"type": "function", "name": "get_weather"},
                                   max_output_tokens=5)
    assert response.status == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"
    assert body["usage"]["output_tokens"] <= 5


BUILT_IN = [{"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["vs_1"]},
            {"type": "code_interpreter", "container": {"type": "auto"}}, {"type": "image_generation"},
            {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com/sse",
             "require_approval": "never"}]


def test_built_in_tools_are_echoed_and_one_is_used_when_required(client):
    response, body = responses_raw(client, model="gpt-4o", input="hi", tools=BUILT_IN, tool_choice="required")
    assert body["tools"] == BUILT_IN
    assert body["output"][0]["type"] != "message" and body["output"][-1]["type"] == "message"
    assert response.output_text


def test_function_tools_are_echoed_with_openai_defaults(client):
    _, body = responses_raw(client, model="gpt-4o", input="hi", tool_choice="none",
                            tools=[{"type": "function", "name": "get_time", "parameters": TIME_PARAMS}])
    assert body["tools"] == [{"type": "function", "name": "get_time", "description": None,
                              "parameters": TIME_PARAMS, "strict": True}]


@pytest.mark.parametrize("params", [
    {"tools": RESPONSES_TOOLS, "tool_choice": {"type": "function", "name": "nope"}},
    {"tool_choice": "required"},
])
def test_responses_bad_tool_choice_is_a_400(client, params):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-4o", input="hi", **params)
    assert info.value.param == "tool_choice"


@pytest.mark.parametrize("parameters", [
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10**30}}, "required": ["n"]},
    {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    {"type": "object", "properties": {"s": {"type": "string", "minLength": 10**9}}, "required": ["s"]},
    {},
])
def test_odd_parameter_schemas_still_give_a_json_object(client, parameters):
    tools = [{"type": "function", "function": {"name": "odd", "parameters": parameters}}]
    completion, _ = chat_raw(client, model="gpt-4o", messages=ASK, tools=tools, tool_choice="required")
    [call] = completion.choices[0].message.tool_calls
    assert isinstance(json.loads(call.function.arguments), dict)
