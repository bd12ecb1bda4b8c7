"""Ground truth per request: response headers, the JSONL trace file and the access log."""
from __future__ import annotations

import json
import re
import time

import openai
import pytest

TTFT_MS, GAP_MS, TOKENS = 200, 20, 5
DURATION_MS = TTFT_MS + (TOKENS - 1) * GAP_MS
REQUEST_ID = re.compile(r"^req_[0-9a-f]{32}$")


@pytest.fixture(scope="module")
def traced(live_server_factory, tmp_path_factory):
    """A paced server writing a trace file and a JSON access log (collected from its output)."""
    path = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    server = live_server_factory("--ttft-ms", str(TTFT_MS), "--tbt-ms", str(GAP_MS),
                                 "--target-tokens", str(TOKENS), "--trace", str(path),
                                 "--log-format", "json")
    server.trace_path = path
    return server


def lines_with(read, request_id: str, timeout: float = 10.0) -> list[dict]:
    """The JSON lines (from `read()`) whose id is `request_id`, once there are some."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [json.loads(line) for line in read() if request_id in line]
        if found:
            return found
        time.sleep(0.05)
    return []


def trace_lines(server):
    return lambda: server.trace_path.read_text().splitlines() if server.trace_path.exists() else []


def test_request_id_is_generated_and_reaches_the_sdk(traced):
    raw = traced.client().responses.with_raw_response.create(model="gpt-4o-mini", input="hi")
    assert REQUEST_ID.match(raw.headers["x-request-id"])
    assert raw.parse()._request_id == raw.headers["x-request-id"]


def test_request_id_sent_by_the_client_is_echoed(traced):
    raw = traced.client().responses.with_raw_response.create(
        model="gpt-4o-mini", input="hi", extra_headers={"x-request-id": "my-trace-42"})
    assert raw.headers["x-request-id"] == "my-trace-42"


def test_json_answer_carries_the_intended_timing(traced):
    raw = traced.client().responses.with_raw_response.create(model="gpt-4o-mini", input="hi")
    response = raw.parse()
    assert raw.headers["x-llmsim-ttft-ms"] == f"{TTFT_MS:.3f}"
    assert raw.headers["x-llmsim-duration-ms"] == f"{DURATION_MS:.3f}"
    assert raw.headers["x-llmsim-tokens"] == str(response.usage.output_tokens) == str(TOKENS)
    assert int(raw.headers["openai-processing-ms"]) >= DURATION_MS     # measured: headers after the wait


def test_stream_headers_come_before_the_body(traced):
    client = traced.client()
    with client.responses.with_streaming_response.create(model="gpt-4o-mini", input="hi",
                                                          stream=True) as raw:
        headers = raw.headers
        assert REQUEST_ID.match(headers["x-request-id"])
        assert headers["x-llmsim-ttft-ms"] == f"{TTFT_MS:.3f}"
        assert headers["x-llmsim-tokens"] == str(TOKENS)
        assert headers["openai-processing-ms"].isdigit()
        body = raw.read()
    assert b"response.completed" in body


def test_error_answers_carry_a_request_id_and_no_plan_headers(traced):
    with pytest.raises(openai.NotFoundError) as caught:
        traced.client().responses.create(model="no-such-model", input="hi")
    headers = caught.value.response.headers
    assert REQUEST_ID.match(headers["x-request-id"])
    assert "x-llmsim-ttft-ms" not in headers


def test_trace_line_holds_intended_and_actual_timing(traced):
    client = traced.client()
    response = client.responses.create(model="gpt-4o-mini", input="hi",
                                       extra_headers={"x-request-id": "trace-plain"})
    [line] = lines_with(trace_lines(traced), "trace-plain")
    assert line["endpoint"] == "responses" and line["model"] == "gpt-4o-mini"
    assert line["stream"] is False and line["status"] == 200
    assert line["ttft_ms"] == TTFT_MS and line["duration_ms"] == DURATION_MS
    assert line["gaps_ms"] == {"mean": GAP_MS, "p50": GAP_MS, "max": GAP_MS}
    assert line["tokens"] == {"prompt": response.usage.input_tokens,
                              "completion": response.usage.output_tokens, "reasoning": 0}
    assert line["fault"] is None
    assert line["end"] - line["start"] >= DURATION_MS / 1000


def test_trace_line_of_a_stream(traced):
    for _ in traced.client().responses.create(model="gpt-4o-mini", input="hi", stream=True,
                                              extra_headers={"x-request-id": "trace-stream"}):
        pass
    [line] = lines_with(trace_lines(traced), "trace-stream")
    assert line["stream"] is True and line["ttft_ms"] == TTFT_MS
    assert line["tokens"]["completion"] == TOKENS


def test_trace_line_names_an_injected_fault(traced):
    with pytest.raises(openai.RateLimitError):
        traced.client().responses.create(model="gpt-4o-mini", input="hi", extra_headers={
            "x-request-id": "trace-fault", "x-llmsim-fault": "rate_limit"})
    [line] = lines_with(trace_lines(traced), "trace-fault")
    assert (line["fault"], line["injected"], line["status"]) == ("rate_limit", True, 429)
    assert line["model"] is None                    # failed before it was planned


def test_json_access_log_has_one_line_per_request(traced):
    traced.client().responses.create(model="gpt-4o-mini", input="hi",
                                     extra_headers={"x-request-id": "logged-1"})
    [line] = lines_with(lambda: traced.output().splitlines(), "logged-1")
    assert (line["method"], line["path"], line["status"]) == ("POST", "/v1/responses", 200)
    assert line["model"] == "gpt-4o-mini" and line["elapsed_ms"] >= DURATION_MS


async def test_text_access_log_line(app_client, capsys):
    async with app_client(log_format="text") as client:
        await client.post("/v1/responses", json={"model": "gpt-4o-mini", "input": "hi"},
                          headers={"x-request-id": "text-1"})
    [line] = [text for text in capsys.readouterr().err.splitlines() if "text-1" in text]
    assert '"POST /v1/responses" 200' in line and "model=gpt-4o-mini" in line


async def test_access_log_is_off_by_default(app_client, capsys):
    async with app_client() as client:
        await client.post("/v1/responses", json={"model": "gpt-4o-mini", "input": "hi"},
                          headers={"x-request-id": "quiet-1"})
    assert "quiet-1" not in capsys.readouterr().err


def test_chat_answers_carry_the_ground_truth_headers(traced):
    raw = traced.client().chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    completion = raw.parse()
    assert REQUEST_ID.match(raw.headers["x-request-id"])
    assert raw.headers["x-llmsim-ttft-ms"] == f"{TTFT_MS:.3f}"
    assert raw.headers["x-llmsim-tokens"] == str(completion.usage.completion_tokens)


def test_websocket_turns_get_one_trace_line_each(traced):
    with traced.client().responses.connect(extra_headers={"x-request-id": "ws-trace"}) as conn:
        for text in ("one", "two"):
            conn.response.create(model="gpt-4o-mini", input=text)
            for event in conn:
                if event.type == "response.completed":
                    break
    lines = {line["id"]: line for line in lines_with(trace_lines(traced), "ws-trace:2")}
    lines.update({line["id"]: line for line in lines_with(trace_lines(traced), "ws-trace:1")})
    assert set(lines) == {"ws-trace:1", "ws-trace:2"}
    for line in lines.values():
        assert (line["endpoint"], line["stream"], line["model"]) == ("websocket", True, "gpt-4o-mini")
        assert line["ttft_ms"] == TTFT_MS and line["tokens"]["completion"] == TOKENS
        assert line["end"] - line["start"] >= DURATION_MS / 1000
