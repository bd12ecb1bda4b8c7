"""Fixtures: one recorded exchange per JSON file, and the key a request is matched by.

A fixture holds the request, the response (status, a few headers, and the body, or the SSE
events each with its time after the request was sent), the model and the match key.

The key is the endpoint (the API's name, as its adapter gives it), the model, whether it
streams, and hashes of the system prompt (Chat: system and developer messages; Responses:
`instructions`; Anthropic: `system`; Gemini: `systemInstruction`), the tools and the whole
history (`HISTORY`: Chat's and Anthropic's `messages`, Gemini's `contents`, Responses' `input`
after the key of the response a `previous_response_id` names, and the others' `input` or
`prompt`). Ids (item, call, response ids) are left out of every hash, so
a conversation that carries the fresh ids a replay handed out still matches its next step,
and two steps with the same last message but different histories never collide.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from llmsim.errors import ConfigError
from llmsim.sim.embeddings import GEMINI_METHODS, gemini_request
from llmsim.sim.gemini_plan import camel_case

FORMAT = 1                       # `llmsim_fixture` in every file
ENDPOINTS = {"/responses": "responses", "/chat/completions": "chat", "/completions": "completions",
             "/messages": "anthropic", "/embeddings": "embeddings", "/moderations": "moderations",
             "/responses/compact": "compact"}          # by the path's end (any base path); the first wins
GEMINI = re.compile(r"/models/([^/:]+):(generateContent|streamGenerateContent|embedContent|batchEmbedContents)$")
NAMES = frozenset({*ENDPOINTS.values(), "gemini", "gemini_embed"})
HISTORY = {"chat": "messages", "anthropic": "messages", "gemini": "contents", "completions": "prompt",
           "gemini_embed": "requests"}
SYSTEM = {"responses": "instructions", "compact": "instructions", "anthropic": "system",
          "gemini": "systemInstruction"}
ID_FIELDS = frozenset({"id", "call_id", "tool_call_id", "item_id", "response_id", "previous_response_id"})
NO_PARENT = "-"
KEY_LENGTH = 32                  # hex digits of a match key


def endpoint_of(path: str) -> str | None:
    """The API a path is one of the routes of (any base path), None for none recorded."""
    for suffix, name in ENDPOINTS.items():
        if path.endswith(suffix):
            return name
    found = GEMINI.search(path)
    if found is None:
        return None
    return "gemini_embed" if found.group(2) in GEMINI_METHODS else "gemini"


def request_of(endpoint: str, path: str, body: dict) -> dict:
    """The request as the pipeline sees it: a Gemini body camelCased, with its path's model and
    whether it streams."""
    if endpoint not in ("gemini", "gemini_embed"):
        return body
    model, method = GEMINI.search(path).groups()
    if endpoint == "gemini_embed":
        return gemini_request(model, method, body)
    return {**camel_case(body), "model": model, "stream": method == "streamGenerateContent"}


def without_ids(value: Any) -> Any:
    """`value` with every id field left out, at any depth."""
    if isinstance(value, dict):
        return {k: without_ids(v) for k, v in value.items() if k not in ID_FIELDS}
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def key(endpoint: str, body: dict, parent: str | None = None) -> str:
    """The match key of a request body; `parent` is the key of the exchange whose response a
    Responses `previous_response_id` continues (None: it continues none)."""
    if endpoint == "chat":
        history = body.get("messages") or []
        system = [m.get("content") for m in history if isinstance(m, dict)
                  and m.get("role") in ("system", "developer")]
    else:
        history, system = body.get(HISTORY.get(endpoint, "input")), body.get(SYSTEM.get(endpoint, ""))
    return _digest({
        "endpoint": endpoint, "model": body.get("model"), "stream": bool(body.get("stream")),
        "system": _digest(system), "tools": _digest(without_ids(body.get("tools"))),
        "history": _digest([parent or NO_PARENT, without_ids(history)]),
    })[:KEY_LENGTH]


def response_id(fixture: dict) -> str | None:
    """The id of the Responses response a fixture recorded (what a later request's
    `previous_response_id` names)."""
    response = fixture["response"]
    if isinstance(response.get("body"), dict):
        return response["body"].get("id") if response["body"].get("object") == "response" else None
    for event in response.get("events") or ():
        data = event.get("data")
        if isinstance(data, dict) and isinstance(data.get("response"), dict):
            return data["response"].get("id")
    return None


# -- files -------------------------------------------------------------------------------
def write(directory: Path, number: int, fixture: dict) -> Path:
    """Write `fixture` as `<number>-<endpoint>-<key>.json` (the number keeps the recording order)."""
    path = directory / f"{number:05d}-{fixture['endpoint']}-{fixture['key'][:12]}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def next_number(directory: Path) -> int:
    """The number after the highest fixture file's already in `directory`."""
    numbers = [int(m.group(1)) for p in directory.glob("*.json") if (m := re.match(r"(\d+)-", p.name))]
    return max(numbers, default=0) + 1


def load(directory: Path) -> list[dict]:
    """Every fixture in `directory`, in recording order; a bad file raises ConfigError naming it."""
    if not directory.is_dir():
        raise ConfigError(f"replay: {directory}: not a directory (llmsim record --out writes one)")
    found = []
    for path in sorted(directory.glob("*.json")):
        try:
            fixture = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"replay: {path}: not a JSON fixture ({exc})") from None
        if not (isinstance(fixture, dict) and fixture.get("llmsim_fixture") == FORMAT
                and isinstance(fixture.get("key"), str) and isinstance(fixture.get("response"), dict)
                and fixture.get("endpoint") in NAMES):
            raise ConfigError(f"replay: {path}: not an llmsim fixture (expected llmsim_fixture: {FORMAT}, "
                              f"endpoint: one of {', '.join(sorted(NAMES))}, key and response)")
        found.append(fixture)
    return found
