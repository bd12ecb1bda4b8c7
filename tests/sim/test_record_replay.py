"""Record and replay against live servers: `llmsim record` proxies the SDK's traffic to another
llmsim (the upstream, with large fixed gaps between events) and writes fixtures; `llmsim serve
--replay DIR --replay-strict` answers the same conversation from them, with the same content,
fresh ids and the recorded timing. One upstream, one recorder and one replaying server for
the module; a three-step streamed tool loop (Responses) and a two-step JSON loop (Chat)."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
from openai import OpenAI, RateLimitError

import oai_schemas
import sse
from llmsim.testing import Server, free_port
from our_spec import check_error, check_events
from recorderproc import Recorder

TTFT_S, TBT_S = 0.5, 0.05       # the upstream's fixed timing: gaps a busy machine cannot blur
TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                    "additionalProperties": False}},
    {"type": "function", "name": "get_time", "description": "Local time in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                    "additionalProperties": False}},
]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS]
QUESTION = "What is the weather and the time in Paris?"
DELTAS = ("response.output_text.delta", "response.function_call_arguments.delta")
EXCHANGES = 11          # what the recording loops below send: 3 + 2 Responses and Chat steps, 6 more


def client_of(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)


def responses_loop(client: OpenAI) -> list[dict]:
    """A three-step streamed tool loop: the question (calls), the results (calls again,
    required), the results (an answer). Per step: what it said, its events' data and when
    (seconds after the request) its first delta and its completion arrived."""
    history: list = [{"role": "user", "content": QUESTION}]
    steps = []
    for choice in ("auto", "required", "auto"):
        began = time.monotonic()
        first = None
        events = []
        with client.responses.create(model="gpt-4o", input=history, tools=TOOLS, tool_choice=choice,
                                     stream=True, store=False) as stream:
            for event in stream:
                events.append(event.model_dump(mode="json", exclude_unset=True))
                if first is None and event.type in DELTAS:
                    first = time.monotonic() - began
                if event.type == "response.completed":
                    done, response = time.monotonic() - began, event.response
        calls = [item for item in response.output if item.type == "function_call"]
        steps.append({"text": response.output_text, "calls": [(c.name, c.arguments) for c in calls],
                      "first": first, "done": done, "events": events, "id": response.id,
                      "call_ids": [c.call_id for c in calls]})
        history += [item.model_dump(exclude_none=True) for item in response.output]
        history += [{"type": "function_call_output", "call_id": c.call_id, "output": f"{c.name}: fine"}
                    for c in calls]
    return steps


def chat_loop(client: OpenAI) -> list[dict]:
    """A two-step Chat tool loop: the question (a call, a JSON body), the result (an answer, streamed)."""
    messages: list = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    completion = client.chat.completions.create(model="gpt-4o", messages=messages, tools=CHAT_TOOLS,
                                                parallel_tool_calls=False)
    message = completion.choices[0].message
    calls = message.tool_calls or []
    steps = [{"text": message.content, "calls": [(c.function.name, c.function.arguments) for c in calls],
              "id": completion.id}]
    messages.append(message.model_dump(exclude_none=True))
    messages += [{"role": "tool", "tool_call_id": c.id, "content": "fine"} for c in calls]
    with client.chat.completions.create(model="gpt-4o", messages=messages, tools=CHAT_TOOLS,
                                        stream=True) as stream:
        chunks = list(stream)
    steps.append({"text": "".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                  "calls": [], "id": chunks[0].id})
    return steps


def chained_loop(client: OpenAI) -> list[dict]:
    """A two-step Responses tool loop in JSON bodies, chained by `previous_response_id`."""
    steps, previous, follow = [], None, [{"role": "user", "content": QUESTION}]
    for _ in range(2):
        response = client.responses.create(model="gpt-4o", input=follow, tools=TOOLS, previous_response_id=previous,
                                           parallel_tool_calls=False)
        calls = [item for item in response.output if item.type == "function_call"]
        steps.append({"text": response.output_text, "calls": [(c.name, c.arguments) for c in calls],
                      "id": response.id, "previous": response.previous_response_id})
        previous = response.id
        follow = [{"type": "function_call_output", "call_id": c.call_id, "output": "fine"} for c in calls]
    return steps


def agent_run(url: str) -> tuple[str, list[str]]:
    """An openai-agents run with one tool (the model calls it, then answers): its final
    output and the arguments of each call it made."""
    import asyncio

    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI
    set_tracing_disabled(True)
    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        calls.append(city)
        return f"sunny in {city}"

    async def run():
        model = OpenAIResponsesModel("gpt-4o", AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0))
        agent = Agent(name="weather", instructions="Be brief.", model=model, tools=[get_weather])
        return (await Runner.run(agent, QUESTION)).final_output
    return asyncio.run(run()), calls


def retried(client: OpenAI) -> tuple[int, str]:
    """One request answered 429 (an injected fault), then the same again, answered: the
    first one's status and the retry's text."""
    ask = dict(model="gpt-4o", input="Retry me.")
    try:
        client.responses.create(**ask, extra_headers={"x-llmsim-fault": "rate_limit"})
        status = 200
    except RateLimitError as exc:
        status = exc.status_code
    return status, client.responses.create(**ask).output_text


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The fixture directory and what the client saw while recording through the proxy."""
    out = tmp_path_factory.mktemp("fixtures")
    upstream = Server(["--ttft-ms", str(TTFT_S * 1000), "--tbt-ms", str(TBT_S * 1000), "--target-tokens", "6",
                       "--tool-call-probability", "1"], timeout=120)
    recorder = Recorder(upstream.url, out)
    try:
        client = client_of(recorder.url)
        runs = responses_loop(client), chat_loop(client), chained_loop(client), agent_run(recorder.url), \
            retried(client)
        deadline = time.monotonic() + 10    # the last stream's fixture is written as its end is relayed,
        while len(list(out.glob("*.json"))) < EXCHANGES and time.monotonic() < deadline:
            time.sleep(0.02)                # which may be just after its client read its last event
        yield out, *runs
    finally:
        recorder.stop()
        upstream.stop()


@pytest.fixture(scope="module")
def replayer(recorded):
    server = Server(["--replay", str(recorded[0]), "--replay-strict"], timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def replayed(replayer):
    client = client_of(replayer.url)
    return responses_loop(client), chat_loop(client), chained_loop(client), agent_run(replayer.url), retried(client)


@pytest.fixture(scope="module")
async def instant_replay(recorded):
    """An in-process app replaying the fixtures at once (--replay-speed 0), not strict."""
    from llmsim.app import create_app
    from llmsim.settings import Settings
    app = create_app(Settings(profile="instant", replay=str(recorded[0]), replay_speed=0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as http:
        yield http


def saved(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


# ---- recording ---------------------------------------------------------------------------------
def test_recording_writes_one_fixture_per_exchange_with_a_distinct_key(recorded):
    fixtures = saved(recorded[0])
    assert [f["endpoint"] for f in fixtures] == ["responses"] * 3 + ["chat"] * 2 + ["responses"] * 6
    assert len(fixtures) == EXCHANGES
    assert len({f["key"] for f in fixtures}) == 10       # the retry has its request's key
    assert all(f["model"] == "gpt-4o" and f["request"]["body"]["model"] == "gpt-4o" for f in fixtures)


def test_recorded_events_are_what_the_client_received_with_growing_times(recorded):
    out, steps = recorded[0], recorded[1]
    for fixture, step in zip(saved(out), steps):
        events = fixture["response"]["events"]
        assert [e["data"] for e in events] == step["events"]
        assert all(e["event"] == e["data"]["type"] for e in events)
        times = [e["t"] for e in events]
        assert times == sorted(times)
        assert TTFT_S * 0.9 <= times[-1] <= step["done"] + 0.05
        # streamed through as it came: the client saw the first delta long before the end
        first = next(e["t"] for e in events if e["event"] in DELTAS)
        assert step["done"] - step["first"] >= 0.5 * (times[-1] - first)


def test_the_tool_loop_really_called_tools_then_answered(recorded):
    steps = recorded[1]
    assert steps[0]["calls"] and steps[1]["calls"] and not steps[2]["calls"]
    assert steps[2]["text"]


# ---- replaying -------------------------------------------------------------------------------
def test_a_replayed_streamed_tool_loop_says_the_same(recorded, replayed):
    for before, after in zip(recorded[1], replayed[0]):
        assert after["text"] == before["text"]
        assert after["calls"] == before["calls"]


def test_a_replayed_chat_loop_says_the_same(recorded, replayed):
    for before, after in zip(recorded[2], replayed[1]):
        assert (after["text"], after["calls"]) == (before["text"], before["calls"])
    assert recorded[2][0]["calls"] and recorded[2][1]["text"]


def test_a_replayed_chain_of_previous_response_ids_matches_each_step(recorded, replayed):
    before, after = recorded[3], replayed[2]
    assert before[0]["calls"] and before[1]["text"]
    assert [(s["text"], s["calls"]) for s in after] == [(s["text"], s["calls"]) for s in before]
    assert after[1]["previous"] == after[0]["id"] != before[0]["id"]     # the request's own id, echoed


def test_a_replayed_agent_run_calls_the_same_tool_and_answers_the_same(recorded, replayed):
    (said, calls), (replayed_said, replayed_calls) = recorded[4], replayed[3]
    assert calls and said
    assert (replayed_said, replayed_calls) == (said, calls)


async def test_a_replayed_chain_continues_on_another_replaying_server(replayer, instant_replay, recorded):
    """The replayed response id names its exchange: a server that did not hand it out (another
    worker, host or run) still finds the chain's next step."""
    first = client_of(replayer.url).responses.create(model="gpt-4o", input=[{"role": "user", "content": QUESTION}],
                                                     tools=TOOLS, parallel_tool_calls=False)
    calls = [item for item in first.output if item.type == "function_call"]
    follow = [{"type": "function_call_output", "call_id": c.call_id, "output": "fine"} for c in calls]
    raw = await instant_replay.post("/v1/responses", json={
        "model": "gpt-4o", "previous_response_id": first.id, "input": follow, "tools": TOOLS,
        "parallel_tool_calls": False})
    assert raw.json()["output_text"] == recorded[3][1]["text"]
    assert raw.json()["previous_response_id"] == first.id


def test_the_same_request_recorded_twice_replays_in_order(recorded, replayed):
    status, text = recorded[5]
    assert status == 429 and text
    assert replayed[4] == (429, text)


def test_replayed_ids_are_fresh(recorded, replayed):
    for before, after in zip(recorded[1], replayed[0]):
        assert after["id"] != before["id"] and after["id"].startswith("resp_")
        assert not set(after["call_ids"]) & set(before["call_ids"])
    assert [s["id"] for s in replayed[1]] != [s["id"] for s in recorded[2]]


def test_a_replay_keeps_the_recorded_timing_within_ten_percent(recorded, replayed):
    """The recording's times (each event's arrival at the recorder, after it sent the request)
    against when the replay's first delta and its completion reached the client."""
    for fixture, after in zip(saved(recorded[0]), replayed[0]):
        events = fixture["response"]["events"]
        first = next(e["t"] for e in events if e["event"] in DELTAS)
        done = next(e["t"] for e in events if e["event"] == "response.completed")
        assert first >= TTFT_S * 0.9                # the upstream's gaps really were recorded
        assert abs(after["first"] - first) <= 0.1 * first, (first, after["first"])
        assert abs(after["done"] - done) <= 0.1 * done, (done, after["done"])


def test_a_strict_miss_is_a_404_envelope(replayer):
    raw = httpx.post(f"{replayer.url}/v1/responses", json={"model": "gpt-4o", "input": "never recorded"},
                     timeout=30)
    error = check_error(raw, 404)
    assert error["code"] == "replay_not_found" and "--replay-strict" in error["message"]
    raw = httpx.post(f"{replayer.url}/v1/chat/completions", timeout=30,
                     json={"model": "gpt-4o", "messages": [{"role": "user", "content": "never recorded"}]})
    check_error(raw, 404)


async def test_replayed_events_and_bodies_fit_openais_schema(instant_replay, recorded):
    fixtures = saved(recorded[0])
    raw = await instant_replay.post("/v1/responses", json=fixtures[0]["request"]["body"])
    check_events(sse.parse(raw.text))
    raw = await instant_replay.post("/v1/chat/completions", json=fixtures[3]["request"]["body"])
    oai_schemas.validate_chat_completion(raw.json())
    raw = await instant_replay.post("/v1/chat/completions", json=fixtures[4]["request"]["body"])
    events = sse.parse(raw.text)
    assert events[-1] == (None, "[DONE]")
    for _, chunk in events[:-1]:
        oai_schemas.validate_chat_chunk(chunk)


async def test_a_miss_falls_through_to_simulation(instant_replay, recorded):
    hit = await instant_replay.post("/v1/chat/completions", json=saved(recorded[0])[3]["request"]["body"])
    miss = await instant_replay.post("/v1/chat/completions",
                                     json={"model": "gpt-4o", "messages": [{"role": "user", "content": "new"}]})
    [call] = hit.json()["choices"][0]["message"]["tool_calls"]
    assert (call["function"]["name"], call["function"]["arguments"]) == recorded[2][0]["calls"][0]
    assert miss.status_code == 200
    assert miss.json()["choices"][0]["message"]["content"].startswith("Lorem ipsum")


def test_a_missing_replay_directory_stops_start_up(tmp_path):
    from llmsim.app import create_app
    from llmsim.errors import ConfigError
    from llmsim.settings import Settings
    with pytest.raises(ConfigError, match="replay: .*not a directory"):
        create_app(Settings(replay=str(tmp_path / "absent")))


async def test_the_recorder_answers_an_unreachable_upstream_with_a_502_envelope(tmp_path):
    from llmsim.replay.recorder import create_recorder
    app = create_recorder(f"http://127.0.0.1:{free_port()}", tmp_path)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rec") as http:
        raw = await http.post("/v1/responses", json={"model": "gpt-4o", "input": "hi"})
    assert raw.status_code == 502
    oai_schemas.validate_error_body(raw.json())
    assert raw.json()["error"]["code"] == "upstream_unreachable"
    assert not list(tmp_path.glob("*.json"))


async def relay_until(app, body: dict, leave_on: bytes) -> None:
    """POST `body` to the recorder `app` as a client that stops reading, and leaves, when a
    chunk containing `leave_on` arrives (the recorder is cancelled while relaying it)."""
    left = asyncio.Event()
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if leave_on in message.get("body", b""):
            left.set()
            await asyncio.Event().wait()            # reads no more: only the disconnect ends this
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "query_string": b"", "headers": [(b"content-type", b"application/json")], "server": ("rec", 80),
             "client": ("127.0.0.1", 1), "root_path": ""}
    await asyncio.wait_for(app(scope, receive, send), 30)


@pytest.mark.live
@pytest.mark.parametrize("leave_on, kept", [(b"[DONE]", 1), (b'"role":"assistant"', 0)], ids=["after-done", "mid-stream"])
async def test_a_stream_whose_client_leaves_after_its_last_event_is_recorded(tmp_path, leave_on, kept):
    """A client may close a stream as soon as it reads `[DONE]`, before the upstream's end is
    relayed: the exchange is whole and written. One left mid-stream is not a fixture."""
    from llmsim.replay.recorder import create_recorder
    upstream = Server(["--ttft-ms", "100", "--tbt-ms", "50", "--target-tokens", "6"], timeout=60)
    try:
        app = create_recorder(upstream.url, tmp_path)
        await relay_until(app, {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "Hi"}]},
                          leave_on)
    finally:
        upstream.stop()
    fixtures = saved(tmp_path)
    assert len(fixtures) == kept
    if kept:
        assert fixtures[0]["response"]["events"][-1]["data"] == "[DONE]"


# ---- the match key -----------------------------------------------------------------------------
def chat_history(call_id: str, answer: str) -> dict:
    return {"model": "gpt-4o", "messages": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function",
                                              "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": call_id, "content": answer},
        {"role": "user", "content": "Thanks. And tomorrow?"}]}


def test_the_key_ignores_ids_but_not_the_history():
    from llmsim.replay.fixtures import key
    assert key("chat", chat_history("call_a", "sunny")) == key("chat", chat_history("call_b", "sunny"))
    # the same last message after another history is another step
    assert key("chat", chat_history("call_a", "sunny")) != key("chat", chat_history("call_a", "rain"))
    assert key("chat", chat_history("call_a", "sunny")) != key("responses", chat_history("call_a", "sunny"))
