"""Drift between llmsim and the newest official SDKs' types (`openai.types`, `anthropic.types`,
`google.genai.types`): a representative set of calls, every body and event parsed into its
SDK's model (tests/sdk_types.py). Prints the fields an SDK declares that llmsim never sent,
the fields llmsim sent that an SDK does not declare (marked when openapi/departures.yaml
excuses them) and the bodies that do not parse. Exit status 1 when a field is unknown and not
excused, or a body does not parse.

    python bench/drift.py [--url http://127.0.0.1:PORT]

The calls it makes: docs/benchmarks.md#benchdrift.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import anthropic  # noqa: E402
import httpx  # noqa: E402
import openai  # noqa: E402

import sdk_types  # noqa: E402

MODEL = "gpt-4o"
REASONING_MODEL = "o4-mini"
FUNCTION = {"type": "function", "name": "get_weather", "description": "Weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"], "additionalProperties": False}, "strict": True}
CHAT_TOOL = {"type": "function", "function": {k: v for k, v in FUNCTION.items() if k != "type"}}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}


class Collector:
    """Feeds every object to sdk_types and keeps what fails instead of stopping."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.checked = 0

    def __call__(self, kind: str, data: Any, where: str) -> None:
        self.checked += 1
        try:
            sdk_types.check(kind, data)
        except AssertionError as exc:
            text = str(exc)
            if "unknown to openai.types" not in text:  # unknown fields are reported by sdk_types
                self.problems.append(f"{where}: {text}")


def sse(lines: Iterator[str]) -> Iterator[dict]:
    """JSON `data:` payloads of an SSE body (`[DONE]` skipped)."""
    data: list[str] = []
    for line in list(lines) + [""]:
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line and data:
            payload = "\n".join(data)
            data = []
            if payload != "[DONE]":
                yield json.loads(payload)


def responses_calls(client: openai.OpenAI, check: Callable) -> None:
    requests = [
        dict(model=MODEL, input="Say hello."),
        dict(model=REASONING_MODEL, input="Think, then answer.", reasoning={"effort": "low", "summary": "auto"}),
        dict(model=REASONING_MODEL, input="Think briefly.", reasoning={"effort": "low"},
             include=["reasoning.encrypted_content"], store=False),
        dict(model=MODEL, input=ASK, tools=[FUNCTION], tool_choice="required"),
        dict(model=MODEL, input="Be brief.", instructions="Answer in one word.", max_output_tokens=16,
             metadata={"k": "v"}, temperature=0.5),
    ]
    for i, request in enumerate(requests):
        raw = client.responses.with_raw_response.create(**request)
        body = raw.http_response.json()
        check("Response", body, f"responses.create #{i}")
        with client.responses.with_streaming_response.create(stream=True, **request) as stream:
            for event in sse(stream.iter_lines()):
                check("ResponseStreamEvent", event, f"responses.create #{i} stream {event.get('type')}")
    created = client.responses.create(model=MODEL, input="Remember me.")
    check("Response", client.responses.with_raw_response.retrieve(created.id).http_response.json(),
          "responses.retrieve")
    page = client.responses.input_items.with_raw_response.list(created.id).http_response.json()
    check("ResponseItemList", page, "responses.input_items.list")
    counted = client.responses.input_tokens.with_raw_response.count(model=MODEL, input="Count me.")
    check("TokenCountsResource", counted.http_response.json(), "responses.input_tokens.count")
    background = client.responses.with_raw_response.create(model=MODEL, input="Later.", background=True)
    check("Response", background.http_response.json(), "responses.create background")
    try:
        cancelled = client.responses.with_raw_response.cancel(background.http_response.json()["id"])
        check("Response", cancelled.http_response.json(), "responses.cancel")
    except openai.APIStatusError as exc:  # it may have finished already
        check("ErrorResponse", exc.response.json(), "responses.cancel (finished)")
    client.responses.delete(created.id)
    try:
        client.responses.retrieve(created.id)
    except openai.NotFoundError as exc:
        check("ErrorResponse", exc.response.json(), "responses.retrieve after delete")
    try:
        client.responses.create(model="no-such-model", input="x")
    except openai.APIStatusError as exc:
        check("ErrorResponse", exc.response.json(), "responses.create unknown model")


def chat_calls(client: openai.OpenAI, check: Callable) -> None:
    requests = [
        dict(model=MODEL, messages=ASK),
        dict(model=MODEL, messages=ASK, n=2),
        dict(model=MODEL, messages=ASK, tools=[CHAT_TOOL], tool_choice="required"),
        dict(model=MODEL, messages=ASK, tools=[CHAT_TOOL], n=2),
        dict(model=REASONING_MODEL, messages=ASK, reasoning_effort="low"),
    ]
    for i, request in enumerate(requests):
        raw = client.chat.completions.with_raw_response.create(**request)
        check("CreateChatCompletionResponse", raw.http_response.json(), f"chat #{i}")
        with client.chat.completions.with_streaming_response.create(
                stream=True, stream_options={"include_usage": True}, **request) as stream:
            for chunk in sse(stream.iter_lines()):
                check("CreateChatCompletionStreamResponse", chunk, f"chat #{i} stream")


def models_calls(client: openai.OpenAI, check: Callable) -> None:
    listed = client.models.with_raw_response.list().http_response.json()
    for model in listed["data"]:
        check("Model", model, f"models.list {model.get('id')}")
    check("Model", client.models.with_raw_response.retrieve(MODEL).http_response.json(), "models.retrieve")


def conversation_calls(client: openai.OpenAI, check: Callable) -> None:
    raw = client.conversations.with_raw_response.create(items=[{"role": "user", "content": "Hello!"}],
                                                        metadata={"topic": "drift"})
    conversation = raw.http_response.json()
    check("ConversationResource", conversation, "conversations.create")
    cid = conversation["id"]
    turn = client.responses.with_raw_response.create(model=MODEL, input="And now?", conversation=cid)
    check("Response", turn.http_response.json(), "responses.create in a conversation")
    check("ConversationResource", client.conversations.with_raw_response.retrieve(cid).http_response.json(),
          "conversations.retrieve")
    page = client.conversations.items.with_raw_response.list(cid).http_response.json()
    check("ConversationItemList", page, "conversations.items.list")
    for item in page["data"]:
        check("ConversationItem", item, f"conversation item {item.get('type')}")
    if page["data"]:
        one = client.conversations.items.with_raw_response.retrieve(page["data"][0]["id"], conversation_id=cid)
        check("ConversationItem", one.http_response.json(), "conversations.items.retrieve")
    deleted = client.conversations.with_raw_response.delete(cid).http_response.json()
    check("DeletedConversationResource", deleted, "conversations.delete")
    empty = client.conversations.create()
    check("ConversationItemList", client.conversations.items.with_raw_response.list(empty.id).http_response.json(),
          "conversations.items.list (empty)")


def websocket_calls(client: openai.OpenAI, check: Callable) -> None:
    with client.responses.connect() as conn:
        for request in (dict(model=MODEL, input="Say hello."),
                        dict(model=MODEL, input="Hi", previous_response_id="resp_missing")):
            conn.response.create(**request)
            for event in conn:
                data = event.to_dict()
                kind = "ResponseWsError" if data["type"] == "error" else "ResponseStreamEvent"
                check(kind, data, f"websocket {data['type']}")
                if data["type"] in TERMINAL:
                    break


CALLS = [responses_calls, chat_calls, models_calls, conversation_calls, websocket_calls]
CLAUDE = "claude-sonnet-4-5"
CLAUDE_TOOL = {"name": "get_weather", "description": "Weather in a city.",
               "input_schema": FUNCTION["parameters"]}
GEMINI = "gemini-2.5-flash"


def anthropic_calls(root: str, check: Callable) -> None:
    client = anthropic.Anthropic(base_url=root, api_key="sk-ant-drift", max_retries=0)
    requests = [
        dict(model=CLAUDE, max_tokens=256, messages=ASK),
        dict(model=CLAUDE, max_tokens=2048, messages=ASK, thinking={"type": "enabled", "budget_tokens": 1024}),
        dict(model=CLAUDE, max_tokens=256, messages=ASK, tools=[CLAUDE_TOOL], tool_choice={"type": "any"}),
        dict(model=CLAUDE, max_tokens=256, messages=ASK, stop_sequences=["e"]),
    ]
    for i, request in enumerate(requests):
        check("anthropic.Message", client.messages.with_raw_response.create(**request).http_response.json(),
              f"anthropic messages #{i}")
        with client.messages.with_streaming_response.create(stream=True, **request) as stream:
            for event in sse(stream.iter_lines()):
                if event.get("type") != "ping":     # Anthropic's keep-alive: documented, no SDK type
                    check("anthropic.MessageStreamEvent", event, f"anthropic messages #{i} stream {event['type']}")
    counted = client.messages.with_raw_response.count_tokens(model=CLAUDE, messages=ASK)
    check("anthropic.MessageTokensCount", counted.http_response.json(), "anthropic count_tokens")
    for model in client.models.with_raw_response.list().http_response.json()["data"]:
        check("anthropic.ModelInfo", model, f"anthropic models.list {model.get('id')}")
    try:
        client.messages.create(model="no-such-model", max_tokens=5, messages=ASK)
    except anthropic.APIStatusError as exc:
        check("anthropic.ErrorResponse", exc.response.json(), "anthropic unknown model")


def gemini_calls(root: str, check: Callable) -> None:
    def post(method: str, body: dict, model: str = GEMINI, **params) -> httpx.Response:
        return httpx.post(f"{root}/v1beta/models/{model}:{method}", json=body, params=params, timeout=60)
    ask = {"contents": [{"role": "user", "parts": [{"text": "What's the weather in Paris?"}]}]}
    tools = {"tools": [{"functionDeclarations": [{"name": "get_weather", "parameters": FUNCTION["parameters"]}]}],
             "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}
    thoughts = {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}}
    for i, request in enumerate([ask, {**ask, **tools}, {**ask, **thoughts}]):
        check("gemini.GenerateContentResponse", post("generateContent", request).json(), f"gemini generate #{i}")
        with httpx.stream("POST", f"{root}/v1beta/models/{GEMINI}:streamGenerateContent", params={"alt": "sse"},
                          json=request, timeout=60) as stream:
            for chunk in sse(stream.iter_lines()):
                check("gemini.GenerateContentResponse", chunk, f"gemini stream #{i}")
    check("gemini.CountTokensResponse", post("countTokens", ask).json(), "gemini countTokens")
    embed = {"requests": [{"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "x"}]}}]}
    check("gemini.EmbedContentResponse", post("batchEmbedContents", embed, "gemini-embedding-001").json(),
          "gemini batchEmbedContents")


def collect(base_url: str) -> Collector:
    """Run every call against `base_url` (an OpenAI base URL, e.g. http://127.0.0.1:PORT/v1), and
    the Anthropic and Gemini calls against the same server's root."""
    collector = Collector()
    client = openai.OpenAI(base_url=base_url, api_key="sk-drift", max_retries=0)
    for calls in CALLS:
        calls(client, collector)
    root = base_url.rstrip("/").removesuffix("/v1")
    anthropic_calls(root, collector)
    gemini_calls(root, collector)
    return collector


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running llmsim's root URL (default: start one)")
    args = parser.parse_args(argv)
    sdk_types.reset()
    if args.url:
        collector = collect(args.url.rstrip("/") + "/v1")
    else:
        from llmsim.testing import start
        with start(profile="instant") as server:
            collector = collect(server.openai_url)
    print(f"{collector.checked} bodies and events checked")
    print(sdk_types.report())
    for problem in collector.problems:
        print(f"DOES NOT PARSE: {problem}")
    return 1 if unexcused() or collector.problems else 0


def unexcused() -> list[str]:
    excused = sdk_types.excused()
    return [name for name in sdk_types.unknown() if name not in excused]


if __name__ == "__main__":
    sys.exit(main())
