"""POST /chat/completions through the official SDK against a live server: the completion
body, token accounting, caps, n choices, reasoning, the chunk stream, errors and timing.
Every body and chunk is checked against our openapi.yaml and OpenAI's schemas."""
from __future__ import annotations

import re
import socket
import time

import httpx
import openai
import orjson
import pytest

import counting
import oai_schemas
import sse
from our_spec import check_exchange, validate

HELLO = [{"role": "user", "content": "Say hello"}]


def create_raw(client, **params):
    """Create a completion; return (SDK object, raw JSON body), both schemas checked."""
    raw = client.chat.completions.with_raw_response.create(**params)
    check_exchange(raw.http_response)
    body = raw.http_response.json()
    oai_schemas.validate_chat_completion(body)
    return raw.parse(), body


def stream_raw(base: str, **params) -> list:
    """POST a streaming request with plain httpx; return the parsed SSE (event, data) pairs."""
    r = httpx.post(f"{base}/chat/completions", json={"stream": True, **params}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    return sse.parse(r.text)


def check_chunks(events: list) -> list[dict]:
    """Data-only SSE lines, JSON chunks ending with [DONE]; every chunk schema-checked."""
    assert all(name is None for name, _ in events)
    assert events[-1][1] == "[DONE]"
    chunks = [data for _, data in events[:-1]]
    assert "[DONE]" not in chunks
    for chunk in chunks:
        oai_schemas.validate_chat_chunk(chunk)
        validate("ChatCompletionObject", chunk)
    return chunks


# ---- non-streaming ------------------------------------------------------------------------
def test_create_returns_a_chat_completion(client):
    completion, body = create_raw(client, model="gpt-4o", messages=HELLO)
    assert re.fullmatch(r"chatcmpl-[0-9a-f]+", completion.id)
    assert body["object"] == "chat.completion"
    assert completion.model == "gpt-4o"
    assert completion.system_fingerprint == "fp_llmsim"
    [choice] = completion.choices
    assert choice.index == 0 and choice.finish_reason == "stop"
    assert choice.message.role == "assistant" and choice.message.content
    assert body["choices"][0]["message"]["refusal"] is None
    assert body["choices"][0]["logprobs"] is None


def test_the_v1_and_openai_v1_routes_both_answer(server):
    for base in (f"{server.url}/v1", f"{server.url}/openai/v1"):
        r = httpx.post(f"{base}/chat/completions", json={"model": "gpt-4o", "messages": HELLO})
        assert r.status_code == 200 and r.json()["object"] == "chat.completion"


def test_prompt_tokens_follow_openais_per_message_accounting(client):
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": "Paris."},
                {"role": "user", "content": [{"type": "text", "text": "And of Spain?"}]}]
    completion, _ = create_raw(client, model="gpt-4o", messages=messages)
    expected = counting.conversation(
        counting.message("system", "You are terse.", model="gpt-4o"),
        counting.message("user", "What is the capital of France?", model="gpt-4o"),
        counting.message("assistant", "Paris.", model="gpt-4o"),
        counting.message("user", "And of Spain?", model="gpt-4o"))
    assert completion.usage.prompt_tokens == expected


def test_completion_tokens_count_the_text_and_total_adds_up(client):
    completion, body = create_raw(client, model="gpt-4o", messages=HELLO)
    usage = completion.usage
    assert usage.completion_tokens == counting.count(completion.choices[0].message.content, "gpt-4o")
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


@pytest.mark.parametrize("param", ["max_tokens", "max_completion_tokens"])
def test_a_token_cap_cuts_the_text_with_finish_reason_length(client, param):
    completion, _ = create_raw(client, model="gpt-4o", messages=HELLO, **{param: 7})
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 7
    assert counting.count(completion.choices[0].message.content, "gpt-4o") == 7


def test_a_cap_above_the_text_length_stops_normally(client):
    completion, _ = create_raw(client, model="gpt-4o", messages=HELLO, max_tokens=5000)
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == 100  # the default target length


def test_n_returns_n_choices_and_usage_sums_them(client):
    completion, _ = create_raw(client, model="gpt-4o", messages=HELLO, n=3, max_tokens=9)
    assert [c.index for c in completion.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" and c.message.content for c in completion.choices)
    assert completion.usage.completion_tokens == 3 * 9


def test_reasoning_effort_adds_reasoning_tokens_with_the_responses_multipliers(client):
    low, _ = create_raw(client, model="o3", messages=HELLO, reasoning_effort="low")
    high, _ = create_raw(client, model="o3", messages=HELLO, reasoning_effort="high")
    assert low.usage.completion_tokens_details.reasoning_tokens == round(1.5 * 100)
    assert high.usage.completion_tokens_details.reasoning_tokens == 6 * 100
    # llmsim usage semantics (departure total-tokens-include-reasoning)
    assert high.usage.total_tokens == high.usage.prompt_tokens + 100 + 600


def test_unsupported_reasoning_effort_is_rejected(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="o3", messages=HELLO, reasoning_effort="minimal")
    assert info.value.code == "unsupported_value"
    assert info.value.param == "reasoning_effort"


def test_a_stop_sequence_ends_the_text_before_it(client):
    completion, _ = create_raw(client, model="gpt-4o", messages=HELLO, stop=[" sit"])
    choice = completion.choices[0]
    assert choice.message.content == "Lorem ipsum dolor"
    assert choice.finish_reason == "stop"
    assert completion.usage.completion_tokens == counting.count("Lorem ipsum dolor", "gpt-4o")


def test_tool_results_and_assistant_tool_calls_are_accepted_as_input(client):
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
        {"role": "developer", "content": [{"type": "text", "text": "Answer briefly."}]},
    ]
    completion, _ = create_raw(client, model="gpt-4o", messages=messages)
    assert completion.choices[0].message.content
    expected = counting.conversation(
        counting.message("user", "Weather in Paris?", model="gpt-4o"),
        counting.message("assistant", "get_weather", "{\"city\":\"Paris\"}", model="gpt-4o"),
        counting.message("tool", "18C and sunny", model="gpt-4o"),
        counting.message("developer", "Answer briefly.", model="gpt-4o"))
    assert completion.usage.prompt_tokens == expected


def test_every_documented_request_parameter_is_accepted(client):
    completion, body = create_raw(
        client, model="gpt-4o", messages=HELLO, temperature=0.2, top_p=0.9, presence_penalty=0.5,
        frequency_penalty=-0.5, seed=42, user="u-1", metadata={"run": "7"}, store=False,
        response_format={"type": "json_object"}, logprobs=False, parallel_tool_calls=True,
        service_tier="flex", modalities=["text"], logit_bias={"50256": -100}, verbosity="low",
        safety_identifier="s-1", prompt_cache_key="k")
    assert completion.choices[0].message.content
    assert body["service_tier"] == "flex"


def test_image_parts_are_counted_for_a_vision_model(client):
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}}]}]
    completion, _ = create_raw(client, model="gpt-4o", messages=messages)
    expected = counting.conversation(counting.message("user", "What is this?", model="gpt-4o", images=1))
    assert completion.usage.prompt_tokens == expected


# ---- streaming ----------------------------------------------------------------------------
def test_stream_with_usage_sends_role_content_finish_usage_in_order(client):
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens=12,
                                                  stream=True, stream_options={"include_usage": True}))
    role, *content, finish, usage = chunks
    assert role.choices[0].delta.role == "assistant" and role.choices[0].delta.content == ""
    assert len(content) == 12
    assert all(c.choices[0].delta.content and c.choices[0].finish_reason is None for c in content)
    assert finish.choices[0].finish_reason == "length"
    assert usage.choices == [] and usage.usage.completion_tokens == 12
    assert all(c.usage is None for c in chunks[:-1])
    assert {(c.id, c.created, c.model, c.object) for c in chunks} == {
        (role.id, role.created, "gpt-4o", "chat.completion.chunk")}


def test_streamed_text_equals_the_usage_and_non_streamed_text(client):
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=HELLO, stream=True,
                                                  stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    plain, _ = create_raw(client, model="gpt-4o", messages=HELLO)
    assert text == plain.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == counting.count(text, "gpt-4o")
    assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens


def test_raw_stream_is_data_lines_of_schema_valid_chunks_then_done(server):
    events = stream_raw(server.base, model="gpt-4o", messages=HELLO, max_tokens=5,
                        stream_options={"include_usage": True})
    chunks = check_chunks(events)
    assert [len(c["choices"]) for c in chunks] == [1] * 7 + [0]
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert chunks[-2]["choices"][0]["delta"] == {}
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1


def test_stream_without_include_usage_has_no_usage_anywhere(server):
    chunks = check_chunks(stream_raw(server.base, model="gpt-4o", messages=HELLO, max_tokens=3))
    assert all("usage" not in c for c in chunks)
    assert all(len(c["choices"]) == 1 for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_stream_with_n_sends_every_choice_its_role_content_and_finish(server):
    chunks = check_chunks(stream_raw(server.base, model="gpt-4o", messages=HELLO, n=2, max_tokens=4,
                                     stream_options={"include_usage": True}))
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["index"] == index]
        assert mine[0]["delta"]["role"] == "assistant"
        assert len([m for m in mine if m["delta"].get("content")]) == 4
        assert mine[-1]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 8


def test_stream_of_a_reasoning_model_reports_reasoning_tokens(client):
    chunks = list(client.chat.completions.create(model="o3", messages=HELLO, reasoning_effort="low",
                                                  stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == 150


# ---- errors -------------------------------------------------------------------------------
LONG = "word " * 9000
ERRORS = [
    # (request, exception, status, code, param)
    ({"model": "gpt-4o", "messages": []}, openai.BadRequestError, 400, None, "messages"),
    ({"model": "gpt-4o", "messages": [{"role": "robot", "content": "hi"}]},
     openai.BadRequestError, 400, "invalid_value", "messages[0].role"),
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "video", "video": "x"}]}]},
     openai.BadRequestError, 400, "invalid_value", "messages[0].content[0].type"),
    ({"model": "gpt-4o", "messages": [{"role": "system", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]},
     openai.BadRequestError, 400, "invalid_value", "messages[0].content[0].type"),
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
     openai.BadRequestError, 400, "missing_required_parameter", "messages[0].content[0].text"),
    ({"model": "gpt-4o", "messages": [{"role": "tool", "content": "42"}]},
     openai.BadRequestError, 400, "missing_required_parameter", "messages[0].tool_call_id"),
    ({"model": "gpt-4o", "messages": [{"role": "user"}]},
     openai.BadRequestError, 400, "missing_required_parameter", "messages[0].content"),
    ({"model": "no-such-model", "messages": HELLO}, openai.NotFoundError, 404, "model_not_found", "model"),
    ({"model": "gpt-4", "messages": [{"role": "user", "content": LONG}]},
     openai.BadRequestError, 400, "context_length_exceeded", "messages"),
    ({"model": "gpt-4o", "messages": HELLO, "max_tokens": 0},
     openai.BadRequestError, 400, "invalid_value", "max_tokens"),
    ({"model": "gpt-4o", "messages": HELLO, "max_completion_tokens": -3},
     openai.BadRequestError, 400, "invalid_value", "max_completion_tokens"),
    ({"model": "gpt-4o", "messages": HELLO, "max_tokens": 10**6},
     openai.BadRequestError, 400, "invalid_value", "max_tokens"),
    ({"model": "gpt-4", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]},
     openai.BadRequestError, 400, "invalid_value", "messages[0].content[1]"),
    ({"model": "gpt-4o", "messages": HELLO, "n": 0}, openai.BadRequestError, 400, "invalid_value", "n"),
]


@pytest.mark.parametrize("request_body, exc, status, code, param", ERRORS,
                         ids=[e[4] + ":" + str(e[3]) for e in ERRORS])
def test_bad_requests_raise_the_sdk_error_with_status_code_and_param(client, server, request_body, exc,
                                                                     status, code, param):
    body = dict(request_body)
    with pytest.raises(exc) as info:
        client.chat.completions.create(**body)
    assert info.value.status_code == status
    assert info.value.param == param
    if code is not None:
        assert info.value.code == code
    raw = httpx.post(f"{server.base}/chat/completions", json=body)
    assert raw.status_code == status and raw.headers["content-type"] == "application/json"
    oai_schemas.validate_error_body(raw.json())
    check_exchange(raw)


def test_missing_messages_is_a_400_naming_messages(client, server):
    # create() will not send a request without messages; the SDK's generic post() will
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/chat/completions", body={"model": "gpt-4o"}, cast_to=httpx.Response)
    assert info.value.status_code == 400
    assert info.value.param == "messages" and info.value.code == "missing_required_parameter"
    r = httpx.post(f"{server.base}/chat/completions", json={"model": "gpt-4o"})
    assert r.json()["error"]["type"] == "invalid_request_error"
    oai_schemas.validate_error_body(r.json())
    check_exchange(r)


def test_unknown_top_level_parameters_are_rejected(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-4o", messages=HELLO, extra_body={"temprature": 1})
    assert info.value.param == "temprature"


def test_an_error_is_never_a_stream(server):
    r = httpx.post(f"{server.base}/chat/completions",
                   json={"model": "gpt-4o", "messages": [], "stream": True})
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"


# ---- timing (a live server with fixed latency) --------------------------------------------
@pytest.fixture(scope="module")
def slow(live_server_factory):
    server = live_server_factory("--ttft-ms", "200", "--tbt-ms", "10", "--keepalive-ms", "50",
                                 "--target-tokens", "20")
    server.client().chat.completions.create(model="gpt-4o", messages=HELLO)  # loads the tokenizer
    return server


def test_role_chunk_arrives_after_the_ttft_and_tokens_are_paced(slow):
    client = slow.client()
    start = time.monotonic()
    arrivals = []
    for _chunk in client.chat.completions.create(model="gpt-4o", messages=HELLO, stream=True):
        arrivals.append(time.monotonic() - start)
    assert len(arrivals) == 1 + 20 + 1                # role, one chunk per token, finish
    assert 0.18 <= arrivals[0] < 1.5                 # role chunk: after the 200 ms TTFT
    assert arrivals[-1] >= 0.37                      # last token due at 200 ms + 19 x 10 ms


def test_usage_reports_the_simulated_ttft_and_throughput(slow):
    completion = slow.client().chat.completions.create(model="gpt-4o", messages=HELLO)
    extra = completion.usage.model_extra
    assert extra["time_to_first_token"] == pytest.approx(200, abs=1)
    assert extra["throughput_after_first_token"] == pytest.approx(100, rel=0.05)  # 1 token / 10 ms


def test_non_streaming_answer_waits_for_the_whole_simulated_generation(slow):
    start = time.monotonic()
    slow.client().chat.completions.create(model="gpt-4o", messages=HELLO)
    assert time.monotonic() - start >= 0.35           # 200 ms + 19 x 10 ms


def test_time_a_request_waits_behind_another_counts_toward_its_latency(slow):
    """Two requests pipelined on one connection: the second is served only once the first
    has been answered (~390 ms), yet it arrived at once, so it is due at once."""
    body = orjson.dumps({"model": "gpt-4o", "messages": HELLO})
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", slow.port), timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(request + request)
        received, answers = b"", []
        while len(answers) < 2:
            received += sock.recv(65536)
            while b"\r\n\r\n" in received:
                head, _, rest = received.partition(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])
                if len(rest) < length:
                    break
                answers.append((time.monotonic() - start, head.split(b" ")[1]))
                received = rest[length:]
    assert [status for _, status in answers] == [b"200", b"200"]
    assert answers[0][0] >= 0.35
    assert answers[1][0] < 0.6             # not 2 x 390 ms


def test_keepalive_comments_precede_the_first_chunk(slow):
    with httpx.stream("POST", f"{slow.base}/chat/completions", timeout=10,
                      json={"model": "gpt-4o", "messages": HELLO, "stream": True}) as r:
        text = "".join(r.iter_text())
    before_first = text.split("data: ", 1)[0]
    assert re.search(r"^: \d+(\.\d+)?$", before_first, re.M)
    assert "\n: " not in text.split("data: ", 1)[1]    # none once tokens flow
    assert sse.parse(text)[-1][1] == "[DONE]"


# ---- seed ---------------------------------------------------------------------------------
async def test_same_seed_and_requests_give_the_same_bytes(app_client):
    requests = [{"model": "gpt-4o", "messages": HELLO, "n": 2},
                {"model": "o3", "messages": HELLO, "stream": True, "stream_options": {"include_usage": True}},
                {"model": "gpt-4o", "messages": HELLO}]

    async def run(seed):
        async with app_client(seed=seed, generator="random") as http:
            return [(await http.post("/v1/chat/completions", json=body)).content for body in requests]
    first = await run(7)
    assert first == await run(7)
    assert first != await run(8)
