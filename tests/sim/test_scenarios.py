"""Scenarios and rules (--scenarios FILE) through the official SDK, against live servers."""
from __future__ import annotations

import subprocess
import sys
import uuid

import openai
import pytest

from llmsim.sim import tokens
from oai_schemas import validate_chat_chunk, validate_chat_completion, validate_response_event

MODEL = "gpt-4o"
SUNNY = "It is sunny in Paris, 21 °C."
SCENARIOS = f"""
scenarios:
  weather-agent:
    turns:
      - tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
      - error: rate_limit
        retry_after: 0
      - text: "{SUNNY}"
  parallel:
    turns:
      - tool_calls:
          - {{name: get_weather, arguments: {{city: Paris}}}}
          - {{name: get_time, arguments: '{{"tz":"CET"}}'}}
      - text: "Done."
  looping:
    turns:
      - text: "one"
      - text: "two"
    on_exhausted: loop
  strict:
    turns:
      - text: "only"
    on_exhausted: error
  flaky-stream:
    turns:
      - error: stream_error
        after_tokens: 2
      - text: "one two three four five six"
  shapes:
    turns:
      - refusal: "I can't help with that."
      - json: {{answer: 42, tags: [a, b]}}
rules:
  - when: {{user_contains: "weather", tool_result_for: null}}
    respond: {{tool_calls: [{{name: get_weather, arguments: {{city: Rome}}}}]}}
  - when: {{tool_result_for: get_weather}}
    respond: {{text: "Sunny in Rome."}}
  - when: {{user_matches: "^ping\\\\b"}}
    respond: {{text: "pong"}}
  - when: {{system_contains: "pirate", model: gpt-4o-mini}}
    respond: {{text: "Arr."}}
"""
TOOLS_CHAT = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}} for name in ("get_weather", "get_time")]
TOOLS_RESP = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
              for t in TOOLS_CHAT]


def scenario(name: str) -> dict:
    return {"extra_headers": {"x-llmsim-scenario": name}}


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("scenarios") / "scenarios.yaml"
    path.write_text(SCENARIOS, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server(live_server_factory, scenario_file):
    return live_server_factory("--profile", "instant", "--scenarios", str(scenario_file))


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base, api_key="sk-test", max_retries=2)


def nonce() -> str:
    """A user message of its own, so that attempt counts start afresh."""
    return f"What is the weather in Paris? ({uuid.uuid4().hex})"


def chat_loop(client) -> tuple[list, int]:
    """The weather-agent loop in Chat: (answers, retries the SDK took)."""
    messages = [{"role": "user", "content": nonce()}]
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS_CHAT,
                                           **scenario("weather-agent"))
    call = first.choices[0].message.tool_calls[0]
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "21 C, sunny"}]
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, tools=TOOLS_CHAT,
                                                           **scenario("weather-agent"))
    second = raw.parse()
    return [first.choices[0].finish_reason, call.function.name, call.function.arguments,
            second.choices[0].message.content], raw.retries_taken


def test_chat_tool_loop_runs_to_completion_and_the_rate_limit_retry_plays_the_same_turn(client):
    answers, retries = chat_loop(client)
    assert answers == ["tool_calls", "get_weather", '{"city":"Paris"}', SUNNY]
    assert retries == 1


def test_scripted_rate_limit_without_retries_is_the_sdks_rate_limit_error(server):
    plain = server.client()         # max_retries=0
    messages = [{"role": "user", "content": nonce()},
                {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                                      "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    with pytest.raises(openai.RateLimitError) as caught:
        plain.chat.completions.create(model=MODEL, messages=messages, **scenario("weather-agent"))
    assert caught.value.code == "rate_limit_exceeded"
    again = plain.chat.completions.create(model=MODEL, messages=messages, **scenario("weather-agent"))
    assert again.choices[0].message.content == SUNNY


def test_responses_tool_loop_through_previous_response_id(client):
    first = client.responses.create(model=MODEL, input=nonce(), tools=TOOLS_RESP, **scenario("weather-agent"))
    [call] = first.output
    assert (call.type, call.name, call.arguments) == ("function_call", "get_weather", '{"city":"Paris"}')
    raw = client.responses.with_raw_response.create(
        model=MODEL, previous_response_id=first.id, tools=TOOLS_RESP, **scenario("weather-agent"),
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert raw.retries_taken == 1
    assert raw.parse().output_text == SUNNY


def test_responses_stream_says_the_scripted_text_in_exact_tokens(client):
    events = list(client.responses.create(model=MODEL, input="hi", metadata={"llmsim_scenario": "looping"},
                                          stream=True))
    for event in events:
        validate_response_event(event.to_dict())
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    done = events[-1].response
    assert "".join(deltas) == done.output_text == "one"
    assert done.usage.output_tokens == tokens.count("one", "o200k_base") == len(deltas)


def test_parallel_tool_calls_in_one_turn_count_as_one_assistant_turn(client):
    first = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}],
                                           tools=TOOLS_CHAT, **scenario("parallel"))
    calls = first.choices[0].message.tool_calls
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("get_weather", '{"city":"Paris"}'), ("get_time", '{"tz":"CET"}')]
    messages = [{"role": "user", "content": "go"}, first.choices[0].message.model_dump(exclude_none=True),
                *({"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in calls)]
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS_CHAT, **scenario("parallel"))
    assert second.choices[0].message.content == "Done."


def test_chat_stream_of_scripted_calls_validates(client):
    chunks = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}],
                                                 tools=TOOLS_CHAT, stream=True, **scenario("parallel")))
    for chunk in chunks:
        validate_chat_chunk(chunk.to_dict())
    arguments = {}
    for chunk in chunks:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
    assert arguments == {0: '{"city":"Paris"}', 1: '{"tz":"CET"}'}


def test_on_exhausted_loop_starts_again(client):
    said, messages = [], [{"role": "user", "content": "count"}]
    for _ in range(3):
        answer = client.chat.completions.create(model=MODEL, messages=messages, **scenario("looping"))
        said.append(answer.choices[0].message.content)
        messages += [{"role": "assistant", "content": said[-1]}, {"role": "user", "content": "more"}]
    assert said == ["one", "two", "one"]


def test_on_exhausted_error_is_an_error_envelope(server):
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "only"},
                {"role": "user", "content": "b"}]
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(model=MODEL, messages=messages, **scenario("strict"))
    assert caught.value.code == "scenario_exhausted"


def test_refusal_turn_in_responses_and_chat(client):
    response = client.responses.create(model=MODEL, input="x", **scenario("shapes"))
    [item] = response.output
    assert [(p.type, p.refusal) for p in item.content] == [("refusal", "I can't help with that.")]
    completion = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                **scenario("shapes"))
    validate_chat_completion(completion.to_dict())
    assert (completion.choices[0].message.content, completion.choices[0].message.refusal) == (
        None, "I can't help with that.")


def test_refusal_stream_events_validate(client):
    events = list(client.responses.create(model=MODEL, input="x", stream=True, **scenario("shapes")))
    for event in events:
        validate_response_event(event.to_dict())
    types = [e.type for e in events]
    assert "response.refusal.done" in types and "response.output_text.delta" not in types
    assert "".join(e.delta for e in events if e.type == "response.refusal.delta") == "I can't help with that."
    chunks = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                 stream=True, **scenario("shapes")))
    for chunk in chunks:
        validate_chat_chunk(chunk.to_dict())
    assert "".join(c.choices[0].delta.refusal or "" for c in chunks if c.choices) == "I can't help with that."


def test_json_turn_is_the_value_as_text(client):
    first = client.responses.create(model=MODEL, input="x", **scenario("shapes"))
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="and?", **scenario("shapes"))
    assert second.output_text == '{"answer":42,"tags":["a","b"]}'


def test_websocket_plays_the_scenario(client):
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="x", tools=TOOLS_RESP, metadata={"llmsim_scenario": "parallel"})
        first = [e for e in _turn(conn)]
        conn.response.create(model=MODEL, previous_response_id=first[-1].response.id, tools=TOOLS_RESP,
                             metadata={"llmsim_scenario": "parallel"},
                             input=[{"type": "function_call_output", "call_id": item.call_id, "output": "ok"}
                                    for item in first[-1].response.output])
        second = _turn(conn)
    assert [item.name for item in first[-1].response.output] == ["get_weather", "get_time"]
    assert second[-1].response.output_text == "Done."


def _turn(conn) -> list:
    events = []
    for event in conn:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    raise AssertionError("connection closed before the response finished")


def test_a_mid_stream_error_turn_streams_part_of_the_answer_then_fails(server):
    plain = server.client()
    messages = [{"role": "user", "content": nonce()}]
    with pytest.raises(openai.APIError):
        chunks = []
        for chunk in plain.chat.completions.create(model=MODEL, messages=messages, stream=True,
                                                   **scenario("flaky-stream")):
            chunks.append(chunk)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "one two"
    again = plain.chat.completions.create(model=MODEL, messages=messages, **scenario("flaky-stream"))
    assert again.choices[0].message.content == "one two three four five six"


def test_turns_count_through_a_conversation(client):
    conversation = client.conversations.create()
    said = [client.responses.create(model=MODEL, input="next", conversation=conversation.id,
                                    **scenario("looping")).output_text for _ in range(3)]
    assert said == ["one", "two", "one"]


async def test_default_scenario_answers_requests_naming_none(app_client, scenario_file):
    async with app_client(scenarios=str(scenario_file), default_scenario="looping") as http:
        reply = await http.post("/v1/responses", json={"model": MODEL, "input": "hi"})
    assert reply.json()["output_text"] == "one"


def test_rules_answer_requests_that_select_no_scenario(client):
    messages = [{"role": "user", "content": "Weather please"}]
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS_CHAT)
    call = first.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city":"Rome"}')
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS_CHAT)
    assert second.choices[0].message.content == "Sunny in Rome."


def test_rule_matchers_regex_system_and_model(client):
    def say(model, text, instructions=None):
        return client.responses.create(model=model, input=text, instructions=instructions).output_text
    assert say(MODEL, "ping now") == "pong"
    assert say("gpt-4o-mini", "hello", "Talk like a pirate.") == "Arr."
    assert say(MODEL, "hello", "Talk like a pirate.") not in ("Arr.", "pong")      # model differs: simulated


def test_unknown_scenario_is_a_400_envelope(server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().responses.create(model=MODEL, input="x", **scenario("nope"))
    assert caught.value.code == "unknown_scenario"
    assert caught.value.param == "x-llmsim-scenario"


@pytest.mark.parametrize("content, where", [
    ("scenarios: {a: {turns: [{txt: hi}]}}", "scenarios.a.turns[0]"),
    ("scenarios: {a: {turns: [{text: hi, refusal: 'no'}]}}", "scenarios.a.turns[0]: a turn has exactly one"),
    ("scenarios: {a: {turns: [{text: hi, attempts: 2}]}}", "scenarios.a.turns[0].attempts"),
    ("scenarios: {a: {turns: [{error: rate_limt}]}}", "scenarios.a.turns[0].error"),
    ("scenarios: {a: {turns: [{text: hi}], on_exhausted: stop}}", "scenarios.a.on_exhausted"),
    ("rules: [{when: {user_contains: 3}, respond: {text: x}}]", "rules[0].when.user_contains"),
    ("rules: [{when: {user_matches: '('}, respond: {text: x}}]", "rules[0].when.user_matches"),
])
def test_bad_scenario_file_is_refused_naming_file_and_path(tmp_path, content, where):
    from llmsim.errors import ConfigError
    from llmsim.faults.kinds import load_kinds
    from llmsim.sim.scenarios import ScenarioSet
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        ScenarioSet.load(str(path), list(load_kinds()))
    assert str(caught.value).startswith(f"{path}: at {where}")


@pytest.mark.live
def test_bad_scenario_file_stops_start_up(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("scenarios: {a: {turns: [{error: rate_limt}]}}")
    done = subprocess.run([sys.executable, "-m", "llmsim", "serve", "--port", "0", "--scenarios", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert f"{path}: at scenarios.a.turns[0].error: unknown fault kind 'rate_limt'" in done.stderr


@pytest.fixture(scope="module")
def workers(live_server_factory, scenario_file):
    return live_server_factory("--profile", "instant", "--scenarios", str(scenario_file), "--workers", "2")


def test_same_answers_and_one_attempt_count_with_two_workers(workers):
    """Fresh clients (new connections, spread over both workers) each run the loop: every one
    sees the scripted answers, and each rate limit fails exactly once across the workers."""
    runs = []
    for _ in range(4):
        client = openai.OpenAI(base_url=workers.base, api_key="sk-test", max_retries=2)
        runs.append(chat_loop(client))
        client.close()
    assert all(answers == ["tool_calls", "get_weather", '{"city":"Paris"}', SUNNY] for answers, _ in runs)
    assert [retries for _, retries in runs] == [1, 1, 1, 1]


def test_an_error_turn_fails_once_across_workers(workers):
    """The same history sent over fresh connections (spread over both workers by the kernel):
    exactly one request gets the scripted rate limit, every other one the answer after it."""
    assert _statuses(workers) == [429] + [200] * 7


@pytest.mark.parametrize("backend", ["redis", "sqlite", "lmdb"])
async def test_stores_count_attempts_for_every_process(backend, request, tmp_path):
    """Two store objects on one Redis, SQLite file or LMDB directory (as two processes
    would open them) count one sequence of attempts per key."""
    from llmsim.settings import Settings
    from llmsim.state.store import open_store
    target = {"redis": lambda: request.getfixturevalue("redis_url"), "sqlite": lambda: str(tmp_path / "s.db"),
              "lmdb": lambda: f"lmdb:{tmp_path / 'env'}"}[backend]()
    one, two = (open_store(Settings(store=target)) for _ in range(2))
    key = f"scenario:x:1:{uuid.uuid4().hex}:0"
    try:
        counts = [await one.attempt(key), await two.attempt(key), await one.attempt(key),
                  await two.attempt(key + "-other")]
    finally:
        await one.close()
        await two.close()
    assert counts == [1, 2, 3, 1]


def _statuses(workers) -> list[int]:
    import httpx
    body = {"model": MODEL, "messages": [
        {"role": "user", "content": nonce()},
        {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                              "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]}
    statuses = []
    for _ in range(8):
        with httpx.Client(base_url=workers.base, timeout=30) as http:      # a new connection each
            reply = http.post("/chat/completions", json=body, headers={"x-llmsim-scenario": "weather-agent"})
            statuses.append(reply.status_code)
            if reply.status_code == 200:
                assert reply.json()["choices"][0]["message"]["content"] == SUNNY
    return statuses


def test_openai_agents_runner_plays_the_scenario(server):
    """An openai-agents Runner (Responses model, a function tool) runs the scripted loop, its
    client retrying the scripted rate limit."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    seen = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return "21 C, sunny"

    client = openai.AsyncOpenAI(base_url=server.base, api_key="sk-test", max_retries=2)
    agent = agents.Agent(name="weather", instructions="Answer weather questions.", tools=[get_weather],
                         model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client),
                         model_settings=agents.ModelSettings(extra_headers={"x-llmsim-scenario": "weather-agent"}))
    result = agents.Runner.run_sync(agent, nonce())
    assert seen == ["Paris"]
    assert result.final_output == SUNNY
