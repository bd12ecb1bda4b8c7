"""Built-in tools of the Responses API through the official SDK against a live server: the
tool's item comes before the message (web_search_call with cited text, file_search_call,
code_interpreter_call, image_generation_call with a valid PNG, mcp_list_tools + mcp_call),
with its stream events in order; every body and event validates against OpenAI's schemas."""
from __future__ import annotations

import base64
import json
import struct
import zlib

import httpx
import pytest

import oai_schemas
import sse
from counting import count
from our_spec import check_events, check_exchange, check_response_body

WEB_SEARCH = {"type": "web_search"}
FILE_SEARCH = {"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 2}
CODE = {"type": "code_interpreter", "container": {"type": "auto"}}
IMAGE = {"type": "image_generation", "partial_images": 2}
MCP = {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com/sse",
       "require_approval": "never"}
ASK = "What is the weather in Paris today?"
TEXT_EVENTS = ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
               "response.output_text.done", "response.content_part.done", "response.output_item.done"]


def create(client, **params) -> tuple[object, dict]:
    raw = client.responses.with_raw_response.create(model="gpt-4o", input=ASK, **params)
    check_exchange(raw.http_response)
    body = raw.http_response.json()
    check_response_body(body)
    return raw.parse(), body


def stream(server, **body) -> list[tuple[str, dict]]:
    response = httpx.post(f"{server.base}/responses", timeout=30,
                          json={"model": "gpt-4o", "input": ASK, "stream": True, **body})
    assert response.status_code == 200
    check_exchange(response)
    events = sse.parse(response.text)
    check_events(events)
    return events


def collapse(types: list[str]) -> list[str]:
    out = []
    for kind in types:
        if not (out and out[-1] == kind and kind.endswith((".delta", ".annotation.added"))):
            out.append(kind)
    return out


def item_events(events: list[tuple[str, dict]], output_index: int) -> list[str]:
    return collapse([name for name, data in events if data.get("output_index") == output_index])


# ---- web_search -------------------------------------------------------------------------------
def test_web_search_gives_a_search_call_then_text_with_url_citations(client):
    response, body = create(client, tools=[WEB_SEARCH], tool_choice={"type": "web_search"})
    assert [item.type for item in response.output] == ["web_search_call", "message"]
    call = response.output[0]
    assert call.status == "completed" and call.action.type == "search"
    assert "Paris" in call.action.query
    text = response.output[1].content[0]
    assert text.text == response.output_text
    assert text.annotations
    for annotation in text.annotations:
        assert annotation.type == "url_citation" and annotation.url.startswith("https://")
        cited = text.text[annotation.start_index:annotation.end_index]
        assert cited and cited == cited.strip() and annotation.end_index <= len(text.text)


def test_web_search_preview_is_chosen_by_its_own_type(client):
    response, _ = create(client, tools=[{"type": "web_search_preview"}],
                         tool_choice={"type": "web_search_preview"})
    assert [item.type for item in response.output] == ["web_search_call", "message"]


def test_web_search_sources_are_listed_only_when_included(client):
    _, plain = create(client, tools=[WEB_SEARCH], tool_choice={"type": "web_search"})
    assert "sources" not in plain["output"][0]["action"]
    _, body = create(client, tools=[WEB_SEARCH], tool_choice={"type": "web_search"},
                     include=["web_search_call.action.sources"])
    cited = {a["url"] for a in body["output"][1]["content"][0]["annotations"]}
    assert cited == {s["url"] for s in body["output"][0]["action"]["sources"]}


@pytest.mark.parametrize("tool", [WEB_SEARCH, CODE, MCP], ids=lambda t: t["type"])
def test_output_tokens_are_the_exact_count_of_the_text(client, tool):
    response, _ = create(client, tools=[tool], tool_choice="required")
    assert response.output[0].type != "message"
    assert response.usage.output_tokens == count(response.output_text, "gpt-4o")


@pytest.mark.parametrize("cut", [{"max_output_tokens": 16},
                                 {"extra_headers": {"x-llmsim-fault": "content_filter;after_tokens=12"}}],
                         ids=["max_output_tokens", "content_filter"])
def test_a_cut_text_keeps_only_citations_within_it(client, cut):
    _, body = create(client, tools=[WEB_SEARCH], tool_choice={"type": "web_search"}, **cut)
    assert body["status"] == "incomplete"
    text = body["output"][1]["content"][0]
    assert text["text"] == body["output_text"] and body["usage"]["output_tokens"] == count(text["text"], "gpt-4o")
    for annotation in text["annotations"]:
        assert 0 <= annotation["start_index"] < annotation["end_index"] <= len(text["text"])
    if "max_output_tokens" in cut:
        assert text["annotations"]


def test_web_search_stream_events_are_in_order(server):
    events = stream(server, tools=[WEB_SEARCH], tool_choice={"type": "web_search"})
    assert item_events(events, 0) == [
        "response.output_item.added", "response.web_search_call.in_progress",
        "response.web_search_call.searching", "response.web_search_call.completed",
        "response.output_item.done"]
    message = item_events(events, 1)
    assert message == [*TEXT_EVENTS[:3], "response.output_text.annotation.added", *TEXT_EVENTS[3:]]
    added = [data for name, data in events if name == "response.output_text.annotation.added"]
    done = next(data for name, data in events if name == "response.content_part.done")
    assert [a["annotation"] for a in added] == done["part"]["annotations"]
    assert [a["annotation_index"] for a in added] == list(range(len(added)))
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["web_search_call", "message"]


def test_web_search_through_the_sdk_stream_helper(server):
    client = server.client()
    with client.responses.stream(model="gpt-4o", input=ASK, tools=[WEB_SEARCH],
                                 tool_choice="required") as events:
        kinds = [event.type for event in events]
        final = events.get_final_response()
    assert "response.web_search_call.completed" in kinds
    assert [item.type for item in final.output] == ["web_search_call", "message"]
    text = final.output[1].content[0]
    assert all(text.text[a.start_index:a.end_index] for a in text.annotations) and text.annotations


def test_web_search_over_a_websocket_sends_the_same_events(client):
    with client.responses.connect() as conn:
        conn.response.create(model="gpt-4o", input=ASK, tools=[WEB_SEARCH], tool_choice="required")
        events = []
        for event in conn:
            data = event.to_dict()
            oai_schemas.validate_response_event(data)
            events.append(data)
            if data["type"] in ("response.completed", "response.incomplete", "error"):
                break
    kinds = [e["type"] for e in events]
    assert kinds.index("response.web_search_call.completed") < kinds.index("response.output_text.delta")
    assert "response.output_text.annotation.added" in kinds
    assert [i["type"] for i in events[-1]["response"]["output"]] == ["web_search_call", "message"]


# ---- required, auto, and the choice of a tool ---------------------------------------------------
ALL_BUILT_IN = [WEB_SEARCH, FILE_SEARCH, CODE, IMAGE, MCP]
BUILT_IN_ITEMS = {"web_search_call", "file_search_call", "code_interpreter_call",
                  "image_generation_call", "mcp_list_tools"}


def test_required_with_only_built_in_tools_uses_one(client):
    seen = set()
    for _ in range(12):
        response, _ = create(client, tools=ALL_BUILT_IN, tool_choice="required")
        assert response.output[0].type in BUILT_IN_ITEMS
        assert response.output[-1].type == "message"
        seen.add(response.output[0].type)
    assert len(seen) > 1


def test_required_with_functions_and_built_in_tools_calls_one_or_the_other(client):
    function = {"type": "function", "name": "get_time", "strict": False,
                "parameters": {"type": "object", "properties": {}}}
    kinds = set()
    for _ in range(20):
        response, _ = create(client, tools=[function, WEB_SEARCH], tool_choice="required")
        kinds.add(response.output[0].type)
    assert kinds == {"function_call", "web_search_call"}


def test_auto_uses_a_built_in_tool_at_the_tool_call_probability(live_server_factory):
    always = live_server_factory("--profile", "instant", "--tool-call-probability", "1").client()
    never = live_server_factory("--profile", "instant", "--tool-call-probability", "0").client()
    for _ in range(3):
        assert always.responses.create(model="gpt-4o", input=ASK, tools=[WEB_SEARCH]).output[0].type \
            == "web_search_call"
        assert [i.type for i in never.responses.create(model="gpt-4o", input=ASK, tools=[WEB_SEARCH]).output] \
            == ["message"]


def test_tool_choice_none_answers_in_text(client):
    response, _ = create(client, tools=ALL_BUILT_IN, tool_choice="none")
    assert [item.type for item in response.output] == ["message"]


def test_choosing_a_built_in_tool_not_offered_is_a_400(client):
    import openai
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-4o", input=ASK, tools=[CODE], tool_choice={"type": "web_search"})
    assert info.value.param == "tool_choice"


# ---- image_generation ---------------------------------------------------------------------------
def decode_png(b64: str) -> tuple[int, int, bytes]:
    """Width, height and raw scanlines of a PNG; asserts its signature, chunk CRCs and IHDR."""
    data = base64.b64decode(b64, validate=True)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, payload = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + payload)
        chunks.append((kind, payload))
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    width, height, depth, colour, _, _, _ = struct.unpack(">IIBBBBB", chunks[0][1])
    assert depth == 8 and colour == 2
    raw = zlib.decompress(b"".join(p for k, p in chunks if k == b"IDAT"))
    assert len(raw) == height * (1 + 3 * width)
    return width, height, raw


def test_image_generation_result_is_a_valid_png(client):
    response, body = create(client, tools=[IMAGE], tool_choice={"type": "image_generation"})
    assert [item.type for item in response.output] == ["image_generation_call", "message"]
    width, height, _ = decode_png(response.output[0].result)
    assert width > 0 and height > 0


def test_image_generation_streams_partial_images(server):
    events = stream(server, tools=[IMAGE], tool_choice={"type": "image_generation"})
    assert item_events(events, 0) == [
        "response.output_item.added", "response.image_generation_call.in_progress",
        "response.image_generation_call.generating", "response.image_generation_call.partial_image",
        "response.image_generation_call.partial_image", "response.image_generation_call.completed",
        "response.output_item.done"]
    partials = [data for name, data in events if name == "response.image_generation_call.partial_image"]
    assert [p["partial_image_index"] for p in partials] == [0, 1]
    for partial in partials:
        decode_png(partial["partial_image_b64"])
    added = next(data for name, data in events if name == "response.output_item.added")
    assert added["item"]["result"] is None


# ---- code_interpreter ---------------------------------------------------------------------------
def test_code_interpreter_gives_code_and_its_logs(client):
    response, _ = create(client, tools=[CODE], tool_choice={"type": "code_interpreter"},
                         include=["code_interpreter_call.outputs"])
    call = response.output[0]
    assert call.type == "code_interpreter_call" and call.container_id and "print(" in call.code
    [output] = call.outputs
    assert output.type == "logs" and output.logs.strip()
    assert response.output[1].type == "message"


def test_code_interpreter_outputs_only_when_included(client):
    response, _ = create(client, tools=[CODE], tool_choice={"type": "code_interpreter"})
    assert response.output[0].outputs is None and response.output[0].code


def test_code_interpreter_stream_sends_the_code_in_deltas(server):
    events = stream(server, tools=[CODE], tool_choice={"type": "code_interpreter"})
    assert item_events(events, 0) == [
        "response.output_item.added", "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta", "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed",
        "response.output_item.done"]
    deltas = "".join(d["delta"] for n, d in events if n == "response.code_interpreter_call_code.delta")
    done = next(d for n, d in events if n == "response.code_interpreter_call_code.done")
    assert deltas == done["code"] == events[-1][1]["response"]["output"][0]["code"]


# ---- file_search --------------------------------------------------------------------------------
def test_file_search_results_only_when_included(client):
    response, _ = create(client, tools=[FILE_SEARCH], tool_choice={"type": "file_search"})
    call = response.output[0]
    assert call.type == "file_search_call" and call.queries and call.results is None
    response, _ = create(client, tools=[FILE_SEARCH], tool_choice={"type": "file_search"},
                         include=["file_search_call.results"])
    results = response.output[0].results
    assert 1 <= len(results) <= 2
    assert all(0 <= r.score <= 1 and r.file_id and r.text for r in results)


def test_file_search_stream_events_are_in_order(server):
    events = stream(server, tools=[FILE_SEARCH], tool_choice={"type": "file_search"},
                    include=["file_search_call.results"])
    assert item_events(events, 0) == [
        "response.output_item.added", "response.file_search_call.in_progress",
        "response.file_search_call.searching", "response.file_search_call.completed",
        "response.output_item.done"]


# ---- mcp ----------------------------------------------------------------------------------------
def test_mcp_lists_the_servers_tools_then_calls_one(client):
    response, _ = create(client, tools=[MCP], tool_choice={"type": "mcp", "server_label": "docs"})
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "message"]
    listing, call = response.output[0], response.output[1]
    assert listing.server_label == call.server_label == "docs"
    assert call.name in {tool.name for tool in listing.tools}
    assert isinstance(json.loads(call.arguments), dict) and call.output


def test_mcp_allowed_tools_limit_the_listing(client):
    tool = {**MCP, "allowed_tools": ["fetch"]}
    response, _ = create(client, tools=[tool], tool_choice={"type": "mcp", "server_label": "docs"})
    assert [t.name for t in response.output[0].tools] == ["fetch"]
    assert response.output[1].name == "fetch"


def test_mcp_stream_events_are_in_order(server):
    events = stream(server, tools=[MCP], tool_choice={"type": "mcp", "server_label": "docs"})
    assert item_events(events, 0) == [
        "response.output_item.added", "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed", "response.output_item.done"]
    assert item_events(events, 1) == [
        "response.output_item.added", "response.mcp_call.in_progress", "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done", "response.mcp_call.completed", "response.output_item.done"]
    deltas = "".join(d["delta"] for n, d in events if n == "response.mcp_call_arguments.delta")
    assert deltas == next(d for n, d in events if n == "response.mcp_call_arguments.done")["arguments"]


@pytest.mark.parametrize("tool", ALL_BUILT_IN, ids=lambda t: t["type"])
def test_every_built_in_item_validates_against_openai(client, tool):
    _, body = create(client, tools=[tool], tool_choice={"type": tool["type"], **(
        {"server_label": "docs"} if tool["type"] == "mcp" else {})},
        include=["file_search_call.results", "code_interpreter_call.outputs", "web_search_call.action.sources"])
    for item in body["output"]:
        oai_schemas.validate("OutputItem", item)


# ---- the plan: timing, and the same bytes from the generated writers ----------------------------
@pytest.fixture(scope="module")
def simulator():
    from llmsim.clock import FakeClock
    from llmsim.render.jsoncodegen import JsonCodegen
    from llmsim.settings import Settings
    from llmsim.simulator import Simulator
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JsonCodegen, "GUARDED", False)
        return Simulator.load(Settings(profile="gpt-4o", seed=5, target_tokens=20), FakeClock())


def plan_for(simulator, tool: dict, **extra):
    from llmsim.sim import responses_plan as planning
    choice = {"type": tool["type"], **({"server_label": "docs"} if tool["type"] == "mcp" else {})}
    body = {"model": "gpt-4o", "input": ASK, "tools": [tool], "tool_choice": choice, **extra}
    return body, planning.plan_response(body, simulator.context("gpt-4o"), [])


@pytest.mark.parametrize("tool", ALL_BUILT_IN, ids=lambda t: t["type"])
def test_the_message_starts_after_the_tool_is_done(simulator, tool):
    _, plan = plan_for(simulator, tool)
    *items, message = plan.output
    assert message.kind == "message" and items
    at = 0.0
    for item in items:
        assert at <= item.start_at <= item.end_at
        for step in [*getattr(item, "deltas", []), *getattr(item, "partials", [])]:
            assert item.start_at <= step.at <= item.end_at
        at = item.end_at
    assert items[-1].end_at <= message.times[0] <= message.times[-1] == plan.end_at


@pytest.mark.parametrize("tool", ALL_BUILT_IN, ids=lambda t: t["type"])
def test_generated_writers_give_the_serialised_values(simulator, tool):
    from llmsim.render.jsonbytes import dumps
    body, plan = plan_for(simulator, tool, stream=True, include=["file_search_call.results",
                                                          "code_interpreter_call.outputs"])
    template = simulator.templates["responses"]
    assert template.body_json(plan=plan, req=body) == dumps(template.body(plan=plan, req=body))
    events = list(template.events(plan=plan, req=body))
    assert all(e.json == dumps(e.data) for e in events)
    for event in events:
        oai_schemas.validate_response_event(event.data)


def test_the_image_is_fixed_by_the_seed(live_server_factory):
    def image(seed: str) -> str:
        client = live_server_factory("--profile", "instant", "--seed", seed).client()
        response = client.responses.create(model="gpt-4o", input=ASK, tools=[IMAGE],
                                           tool_choice={"type": "image_generation"})
        return response.output[0].result
    first, again, other = image("7"), image("7"), image("8")
    assert first == again != other
    assert decode_png(first)[2] != decode_png(other)[2]


@pytest.mark.parametrize("tool", [{**IMAGE, "partial_images": "many"}, {**IMAGE, "partial_images": 9},
                                  {**FILE_SEARCH, "max_num_results": 0}],
                         ids=["partial_images-type", "partial_images-range", "max_num_results"])
def test_bad_built_in_tool_settings_are_a_400(client, tool):
    import openai
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-4o", input=ASK, tools=[tool], tool_choice="required")
    assert info.value.status_code == 400 and "tools" in (info.value.param or "")


def test_mcp_allowed_tools_that_are_not_names_are_a_400(client):
    import openai
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-4o", input=ASK, tools=[{**MCP, "allowed_tools": [1]}],
                                tool_choice="required")
    assert info.value.status_code == 400


def test_a_built_in_tool_choice_the_tools_do_not_offer_is_a_400(client):
    import openai
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-4o", input=ASK, tool_choice={"type": "web_search"})
    assert info.value.param == "tool_choice" and info.value.code == "invalid_value"


def test_allowed_tools_may_list_built_in_and_custom_tools_beside_functions(client):
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    custom = {"type": "custom", "name": "shell"}
    allowed = {"type": "allowed_tools", "mode": "required",
               "tools": [{"type": "function", "name": "get_weather"}, custom, {"type": "mcp", "server_label": "docs"}]}
    for _ in range(6):
        response, _ = create(client, tools=[weather, custom, MCP], tool_choice=allowed)
        kinds = {item.type for item in response.output}
        assert kinds & {"function_call", "mcp_list_tools", "mcp_call"}, kinds
        calls = [item for item in response.output if item.type == "function_call"]
        assert all(call.name == "get_weather" for call in calls)
