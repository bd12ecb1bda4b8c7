"""OpenTelemetry (issue 63): a live server sending GenAI spans and metrics to an OTLP/HTTP receiver
the test starts (tests/otlp_receiver.py), joined to the trace of a real OpenAI client instrumented
with opentelemetry-instrumentation-openai-v2 and the httpx instrumentation; Anthropic's and
Google's SDKs give their providers' names; off, llmsim starts without opentelemetry at all."""
from __future__ import annotations

import sys

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types
from websockets.exceptions import ConnectionClosed

from llmsim import cli
from llmsim.settings import Settings
from otlp_receiver import Receiver

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

SERVER = 2                  # SpanKind SERVER / CLIENT in OTLP
CLIENT = 3
PARENT = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture(scope="module")
def receiver():
    found = Receiver()
    yield found
    found.close()


@pytest.fixture(scope="module")
def server(receiver, live_server_factory):
    return live_server_factory("--profile", "fast", "--allow-any-model", "--otlp-endpoint", receiver.url,
                               env={"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "300",
                                    "OTEL_SERVICE_NAME": "sim-under-test"})


def server_spans(receiver, **attributes):
    """llmsim's SERVER spans whose attributes include these."""
    return [s for s in receiver.spans if s["kind"] == SERVER and s["scope"] == "llmsim"
            and all(s["attributes"].get(k) == v for k, v in attributes.items())]


def one_span(receiver, **attributes) -> dict:
    found = receiver.wait(lambda r: server_spans(r, **attributes), timeout=30)
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def instrumented(receiver):
    """An OpenAI client whose calls the openai-v2 and httpx instrumentations trace, exporting to the
    receiver; yields (client factory, flush)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    provider = TracerProvider(resource=Resource.create({"service.name": "client-under-test"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.url + "/v1/traces")))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    http_clients = []

    def make(server) -> openai.OpenAI:
        http = httpx.Client()
        HTTPXClientInstrumentor.instrument_client(http, tracer_provider=provider)    # injects traceparent
        http_clients.append(http)
        return openai.OpenAI(base_url=server.base, api_key="sk-test", max_retries=0, http_client=http)
    try:
        yield make
    finally:
        instrumentor.uninstrument()
        for http in http_clients:
            http.close()
        provider.shutdown()


def test_the_server_span_joins_the_instrumented_clients_trace(server, receiver, instrumented):
    client = instrumented(server)
    response = client.chat.completions.create(model="trace-chat", max_tokens=12, temperature=0.25,
                                              messages=[{"role": "user", "content": "Say something."}])
    span = one_span(receiver, **{"gen_ai.response.id": response.id})
    assert span["name"] == "chat trace-chat"
    # the client's spans: openai-v2's (CLIENT, the operation) and httpx's (the HTTP call) in one trace
    trace = receiver.wait(lambda r: [s for s in r.spans if s["trace_id"] == span["trace_id"]
                                     and s["kind"] == CLIENT and s["resource"]["service.name"] == "client-under-test"]
                          and len([s for s in r.spans if s["trace_id"] == span["trace_id"]]) >= 3, timeout=30)
    assert trace
    spans = {s["span_id"]: s for s in receiver.spans if s["trace_id"] == span["trace_id"]}
    operation = next(s for s in spans.values() if s["name"] == "chat trace-chat" and s["kind"] == CLIENT)
    ancestors, parent = [], span["parent_span_id"]
    while parent in spans:
        ancestors.append(spans[parent])
        parent = spans[parent]["parent_span_id"]
    assert operation in ancestors                           # the server's span descends from the client's
    assert spans[span["parent_span_id"]]["kind"] == CLIENT  # its parent: the HTTP call that carried it
    attributes = span["attributes"]
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "trace-chat" == attributes["gen_ai.response.model"]
    assert attributes["gen_ai.usage.input_tokens"] == response.usage.prompt_tokens
    assert attributes["gen_ai.usage.output_tokens"] == response.usage.completion_tokens
    assert attributes["gen_ai.response.finish_reasons"] == [c.finish_reason for c in response.choices]
    assert attributes["gen_ai.request.max_tokens"] == 12
    assert attributes["gen_ai.request.temperature"] == 0.25
    assert attributes["http.request.method"] == "POST" and attributes["http.response.status_code"] == 200
    assert attributes["url.path"] == "/v1/chat/completions"
    assert span["resource"]["service.name"] == "sim-under-test"
    first_token = [e for e in span["events"] if e["name"] == "gen_ai.first_token"]
    assert first_token and span["start"] < first_token[0]["time"] <= span["end"]
    # the client's own GenAI span saw the same answer
    assert operation["attributes"]["gen_ai.usage.output_tokens"] == attributes["gen_ai.usage.output_tokens"]


def test_a_traceparent_makes_the_span_a_child_and_the_tracestate_is_kept(server, receiver):
    headers = {"traceparent": f"00-{PARENT}-b7ad6b7169203331-01", "tracestate": "vendor=1,other=x"}
    body = httpx.post(server.base + "/chat/completions", headers=headers, timeout=30,
                      json={"model": "trace-parent", "stream": True,
                            "messages": [{"role": "user", "content": "Say something."}]}).text
    assert "[DONE]" in body
    span = one_span(receiver, **{"gen_ai.request.model": "trace-parent"})
    assert (span["trace_id"], span["parent_span_id"], span["trace_state"]) == \
        (PARENT, "b7ad6b7169203331", "vendor=1,other=x")
    assert span["attributes"]["gen_ai.request.stream"] is True
    assert span["attributes"]["gen_ai.response.time_to_first_chunk"] > 0      # --profile fast: some ms


def test_a_parent_not_sampled_gets_no_span_but_is_counted(server, receiver):
    headers = {"traceparent": "00-1af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}
    httpx.post(server.base + "/chat/completions", headers=headers, timeout=30,
               json={"model": "trace-unsampled", "messages": [{"role": "user", "content": "Say something."}]})
    counted = receiver.wait(lambda r: [m for m in r.metrics if m["name"] == "gen_ai.server.request.duration"
                                       and m["attributes"].get("gen_ai.request.model") == "trace-unsampled"])
    assert counted
    assert not server_spans(receiver, **{"gen_ai.request.model": "trace-unsampled"})


def test_an_injected_fault_is_the_spans_error_type(server, receiver):
    trace = "2af7651916cd43dd8448eb211c80319c"
    with pytest.raises(openai.InternalServerError):
        server.client().chat.completions.create(
            model="trace-fault", messages=[{"role": "user", "content": "Say something."}],
            extra_headers={"x-llmsim-fault": "server_error", "traceparent": f"00-{trace}-b7ad6b7169203331-01"})
    found = receiver.wait(lambda r: [s for s in server_spans(r) if s["trace_id"] == trace], timeout=30)
    assert len(found) == 1
    span = found[0]         # failed before it was planned: no model known (the body is not read)
    assert span["attributes"]["error.type"] == "server_error"
    assert span["attributes"]["http.response.status_code"] == 500
    assert span["status"] == 2                              # STATUS_CODE_ERROR
    assert span["attributes"]["gen_ai.operation.name"] == "chat"
    assert span["attributes"]["llmsim.fault.injected"] is True


def test_a_websocket_turn_cut_by_a_stream_drop_fault_is_an_error_span(server, receiver):
    trace = "4af7651916cd43dd8448eb211c80319c"
    headers = {"traceparent": f"00-{trace}-d7ad6b7169203331-01", "x-llmsim-fault": "stream_drop"}
    with pytest.raises(ConnectionClosed):       # the socket closes (1011) mid-turn
        with server.client().responses.connect(extra_headers=headers) as conn:
            conn.response.create(model="trace-ws-drop", input="Say hello.")
            _ws_turn(conn)
    found = receiver.wait(lambda r: [s for s in server_spans(r) if s["trace_id"] == trace], timeout=30)
    assert len(found) == 1, found
    attributes = found[0]["attributes"]
    assert (attributes["error.type"], attributes["llmsim.fault.injected"]) == ("stream_drop", True)
    assert attributes["gen_ai.request.model"] == "trace-ws-drop"
    assert found[0]["status"] == 2                          # STATUS_CODE_ERROR


def test_each_choices_finish_reason_is_on_the_span(server, receiver):
    answer = server.client().chat.completions.create(model="trace-choices", n=2, max_tokens=3,
                                                     messages=[{"role": "user", "content": "Say something long."}])
    span = one_span(receiver, **{"gen_ai.response.id": answer.id})
    assert span["attributes"]["gen_ai.response.finish_reasons"] == [c.finish_reason for c in answer.choices]
    assert span["attributes"]["gen_ai.request.max_tokens"] == 3


def test_anthropic_and_gemini_give_their_provider_names(server, receiver):
    message = anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0).messages.create(
        model="trace-claude", max_tokens=20, messages=[{"role": "user", "content": "Say something."}])
    span = one_span(receiver, **{"gen_ai.response.id": message.id})
    assert (span["name"], span["attributes"]["gen_ai.provider.name"]) == ("chat trace-claude", "anthropic")
    assert span["attributes"]["gen_ai.response.finish_reasons"] == [message.stop_reason]
    assert span["attributes"]["gen_ai.request.max_tokens"] == 20
    assert span["attributes"]["gen_ai.usage.output_tokens"] == message.usage.output_tokens

    gemini = genai.Client(api_key="gk-test", http_options=types.HttpOptions(base_url=server.url))
    answer = gemini.models.generate_content(model="trace-gemini", contents="Say something.",
                                            config=types.GenerateContentConfig(temperature=0.5))
    span = one_span(receiver, **{"gen_ai.response.id": answer.response_id})
    assert span["name"] == "generate_content trace-gemini"
    assert span["attributes"]["gen_ai.provider.name"] == "gcp.gemini"
    assert span["attributes"]["gen_ai.request.temperature"] == 0.5
    assert span["attributes"]["gen_ai.response.finish_reasons"] == [answer.candidates[0].finish_reason.value]
    assert span["attributes"]["http.route"].endswith("/models/{model}:generateContent")     # the model: a parameter


def _ws_turn(conn) -> list:
    events = []
    for event in conn:
        events.append(event)
        if event.type in ("response.completed", "response.failed", "response.incomplete", "error"):
            return events
    raise AssertionError("the socket closed mid-turn")


def test_each_websocket_turn_is_a_server_span_joined_to_the_upgrades_trace(server, receiver):
    trace = "3af7651916cd43dd8448eb211c80319c"
    headers = {"traceparent": f"00-{trace}-c7ad6b7169203331-01", "tracestate": "ws=1"}
    with server.client().responses.connect(extra_headers=headers) as conn:
        conn.response.create(model="trace-ws", input="Say hello.", max_output_tokens=4000)
        first = _ws_turn(conn)[-1].response
        conn.response.create(model="trace-ws", input="Again.", previous_response_id=first.id)
        second = _ws_turn(conn)[-1].response
        conn.response.create(model="trace-ws", input="Hi", previous_response_id="resp_missing")
        [error] = _ws_turn(conn)
    assert error.type == "error"

    def turns(r):
        found = [s for s in server_spans(r) if s["trace_id"] == trace]
        return found if len(found) >= 3 else None
    spans = receiver.wait(turns, timeout=30)
    assert spans and len(spans) == 3, spans
    assert {(s["parent_span_id"], s["trace_state"]) for s in spans} == {("c7ad6b7169203331", "ws=1")}
    by_id = {s["attributes"].get("gen_ai.response.id"): s for s in spans}
    for response in (first, second):
        span = by_id[response.id]
        attributes = span["attributes"]
        assert span["name"] == "chat trace-ws"
        assert (attributes["gen_ai.provider.name"], attributes["openai.api.type"]) == ("openai", "responses")
        assert attributes["gen_ai.usage.input_tokens"] == response.usage.input_tokens
        assert attributes["gen_ai.usage.output_tokens"] == response.usage.output_tokens
        assert attributes["gen_ai.response.finish_reasons"] == [response.status]
        assert attributes["gen_ai.request.stream"] is True
        assert attributes["gen_ai.response.time_to_first_chunk"] > 0       # --profile fast: some ms
        assert attributes["http.response.status_code"] == 101              # the turn rides the upgrade
        assert "error.type" not in attributes
    assert by_id[first.id]["attributes"]["gen_ai.request.max_tokens"] == 4000
    failed = by_id[None]
    assert failed["attributes"]["error.type"] == "previous_response_not_found"
    assert failed["attributes"]["http.response.status_code"] == 400


def test_the_genai_server_metrics_arrive(server, receiver):
    client = server.client()
    answers = [client.chat.completions.create(model="trace-metrics", messages=[{"role": "user", "content": "Hi."}])
               for _ in range(3)]

    def series(r, name, **attributes):
        return [m for m in r.metrics if m["name"] == name and m["attributes"].get("gen_ai.request.model")
                == "trace-metrics" and all(m["attributes"].get(k) == v for k, v in attributes.items())]
    # cumulative: the latest point of each series counts all three requests
    assert receiver.wait(lambda r: any(m["count"] == 3 for m in series(r, "gen_ai.server.request.duration")))
    for name in ("gen_ai.server.time_to_first_token", "gen_ai.server.time_per_output_token"):
        assert receiver.wait(lambda r, name=name: any(m["count"] == 3 and m["unit"] == "s"
                                                      for m in series(r, name))), name
    output = sum(a.usage.completion_tokens for a in answers)
    assert receiver.wait(lambda r: any(m["sum"] == output for m in series(
        r, "gen_ai.server.token.usage", **{"gen_ai.token.type": "output"})))
    point = series(receiver, "gen_ai.server.request.duration")[-1]
    assert point["attributes"]["gen_ai.provider.name"] == "openai"
    assert point["attributes"]["gen_ai.operation.name"] == "chat"
    assert point["resource"]["service.name"] == "sim-under-test"


def test_without_opentelemetry_installed_it_is_one_line_when_asked_for_and_nothing_when_not(
        monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "opentelemetry", None)      # as if not installed
    for name in list(sys.modules):
        if name.startswith("opentelemetry."):
            monkeypatch.setitem(sys.modules, name, None)
    for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                     "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    assert cli.main(["serve", "--otlp-endpoint", "http://127.0.0.1:4318", "--port", "1"]) == 2   # (before the port)
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "otlp_endpoint asks for OpenTelemetry" in err and "llmsim[otel]" in err
    from llmsim.app import create_app
    assert create_app(Settings(profile="instant")) is not None       # off: starts without it
