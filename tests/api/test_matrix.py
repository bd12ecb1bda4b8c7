"""Capability x API: every capability works on every generating API the app mounts, through
each provider's official SDK against live servers (llmsim.api.pipeline runs them all).

The APIs are the adapters the app builds (llmsim.api.adapters.ADAPTERS): an API added later
without a driver here fails `test_every_api_has_a_driver`, and then every capability is tried
on it. A capability that means nothing for an API is skipped where its adapter says so
(`scripts`, `serves`, `replays`, `seeded`), the reason named; docs/architecture.md lists them.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from llmsim.api.adapters import ADAPTERS
from llmsim.testing import Server
from recorderproc import Recorder

pytestmark = pytest.mark.live

SCRIPTED = "Scripted by the matrix scenario."
SCENARIOS = {"scenarios": {"matrix": {"turns": [{"text": SCRIPTED}]}}}
GPT, CLAUDE, GEMINI = "gpt-4o-mini", "claude-sonnet-4-5", "gemini-2.5-flash"


@dataclass
class Answer:
    text: str                    # what was said (a summary of it, for embeddings and moderations)
    ident: str = ""              # the answer's id (drawn from the request's generator)


@dataclass
class Failure(Exception):
    status: int
    body: dict = field(default_factory=dict)
    headers: dict = field(default_factory=dict)


def _openai(server, key):
    return openai.OpenAI(base_url=server.openai_url, api_key=key, max_retries=0, timeout=30)


def _openai_call(fn):
    try:
        return fn()
    except openai.APIStatusError as exc:
        raise Failure(exc.status_code, exc.body if isinstance(exc.body, dict) else {},
                      dict(exc.response.headers)) from None


class Driver:
    """One API through its SDK: `ask` answers or raises Failure (status, body, headers)."""
    name: str
    model: str

    def ask(self, server, prompt: str = "Say something.", headers: dict | None = None,
            key: str | None = None) -> Answer:
        raise NotImplementedError

    def error(self, failure: Failure) -> dict:
        """The error object of the provider's envelope."""
        return failure.body.get("error", failure.body)

    def envelope(self, failure: Failure) -> str:
        """The error's type (Gemini: its status) as the provider's envelope names it."""
        return self.error(failure).get("type", "")


class Responses(Driver):
    model = GPT
    name = "responses"

    def ask(self, server, prompt="Say something.", headers=None, key=None):
        r = _openai_call(lambda: _openai(server, key or _key()).responses.create(
            model=GPT, input=prompt, extra_headers=headers or {}))
        return Answer(r.output_text, r.id)


class Chat(Driver):
    model = GPT
    name = "chat"

    def ask(self, server, prompt="Say something.", headers=None, key=None):
        r = _openai_call(lambda: _openai(server, key or _key()).chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": prompt}], extra_headers=headers or {}))
        return Answer(r.choices[0].message.content, r.id)


class Completions(Driver):
    model = GPT
    name = "completions"

    def ask(self, server, prompt="Say something.", headers=None, key=None):
        r = _openai_call(lambda: _openai(server, key or _key()).completions.create(
            model=GPT, prompt=prompt, max_tokens=40, extra_headers=headers or {}))
        return Answer(r.choices[0].text, r.id)


class Embeddings(Driver):
    model = "text-embedding-3-small"
    name = "embeddings"

    def ask(self, server, prompt="Say something.", headers=None, key=None):
        r = _openai_call(lambda: _openai(server, key or _key()).embeddings.create(
            model="text-embedding-3-small", input=prompt, extra_headers=headers or {}))
        return Answer(json.dumps(r.data[0].embedding[:8]))


class Moderations(Driver):
    model = "omni-moderation-latest"
    name = "moderations"

    def ask(self, server, prompt="Say something.", headers=None, key=None):
        r = _openai_call(lambda: _openai(server, key or _key()).moderations.create(
            input=prompt, extra_headers=headers or {}))
        return Answer(json.dumps(r.results[0].category_scores.model_dump()), r.id)


class Compaction(Driver):
    model = GPT
    name = "compact"

    def ask(self, server, prompt="Say something.", headers=None, key=None):
        r = _openai_call(lambda: _openai(server, key or _key()).responses.compact(
            model=GPT, input=prompt, extra_headers=headers or {}))
        said = [{k: v for k, v in item.model_dump().items() if k != "id"} for item in r.output]
        return Answer(json.dumps(said), r.id)


class Messages(Driver):
    model = CLAUDE
    name = "anthropic"

    def ask(self, server, prompt="Say something.", headers=None, key=None):
        client = anthropic.Anthropic(base_url=server.url, api_key=key or _key(), max_retries=0, timeout=30)
        try:
            r = client.messages.create(model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": prompt}],
                                       extra_headers=headers or {})
        except anthropic.APIStatusError as exc:
            raise Failure(exc.status_code, exc.body if isinstance(exc.body, dict) else {},
                          dict(exc.response.headers)) from None
        return Answer("".join(b.text for b in r.content if b.type == "text"), r.id)

class Gemini(Driver):
    model = GEMINI
    name = "gemini"

    def ask(self, server, prompt="Say something.", headers=None, key=None):
        options = genai_types.HttpOptions(base_url=server.url, headers=headers or {}, timeout=30_000,
                                          retry_options=genai_types.HttpRetryOptions(attempts=1))
        client = genai.Client(api_key=key or _key(), http_options=options)
        try:
            r = client.models.generate_content(model=GEMINI, contents=prompt)
        except genai_errors.APIError as exc:
            raise Failure(exc.code, {"error": exc.details.get("error", {}) if isinstance(exc.details, dict) else {}},
                          dict(getattr(exc.response, "headers", {}) or {})) from None
        return Answer(r.text or "", r.response_id or "")

    def envelope(self, failure):
        return self.error(failure).get("status", "")


class GeminiEmbed(Gemini):
    model = "gemini-embedding-001"
    name = "gemini_embed"

    def ask(self, server, prompt="Say something.", headers=None, key=None):
        options = genai_types.HttpOptions(base_url=server.url, headers=headers or {}, timeout=30_000,
                                          retry_options=genai_types.HttpRetryOptions(attempts=1))
        client = genai.Client(api_key=key or _key(), http_options=options)
        try:
            r = client.models.embed_content(model=self.model, contents=prompt)
        except genai_errors.APIError as exc:
            raise Failure(exc.code, {"error": exc.details.get("error", {}) if isinstance(exc.details, dict) else {}},
                          dict(getattr(exc.response, "headers", {}) or {})) from None
        return Answer(json.dumps(r.embeddings[0].values[:8]))


class Socket(Driver):
    model = GPT
    """Responses over the WebSocket mode (the SDK's `responses.connect`); an error event is a Failure."""
    name = "websocket"

    def ask(self, server, prompt="Say something.", headers=None, key=None):
        client = _openai(server, key or _key())
        with client.responses.connect(extra_headers=headers or {}) as conn:
            conn.response.create(model=GPT, input=prompt)
            for event in conn:
                if event.type == "error":
                    raise Failure(event.status, {"error": event.error.model_dump()})
                if event.type in ("response.completed", "response.incomplete", "response.failed"):
                    return Answer(event.response.output_text, event.response.id)
        raise AssertionError("the socket closed before the response ended")


DRIVERS = {d.name: d() for d in (Responses, Socket, Chat, Completions, Messages, Gemini, Embeddings,
                                 GeminiEmbed, Moderations, Compaction)}
APIS = [cls.name for cls in ADAPTERS]
ADAPTER = {cls.name: cls for cls in ADAPTERS}


def _key() -> str:
    return f"sk-{uuid.uuid4().hex[:12]}"      # a fresh rate-limit bucket


def _applies(api: str, flag: str, capability: str) -> None:
    if not getattr(ADAPTER[api], flag):
        pytest.skip(f"{capability} means nothing for {api} (its adapter's `{flag}` is false)")


def test_every_api_has_a_driver():
    missing = [api for api in APIS if api not in DRIVERS]
    assert not missing, f"APIs with no driver in tests/api/test_matrix.py (so no capability is proven): {missing}"


# ---- servers ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def main(tmp_path_factory):
    """Rate limits (2 a minute per key and model), scenarios, faults, seeds and stats."""
    scenarios = tmp_path_factory.mktemp("matrix") / "scenarios.json"
    scenarios.write_text(json.dumps(SCENARIOS))
    server = Server(["--profile", "instant", "--generator", "random", "--rate-limit-rpm", "2",
                     "--scenarios", str(scenarios)])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def workers():
    server = Server(["--profile", "instant", "--workers", "2"])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def serving():
    """One slot a model and no queue; each answer's first token 1.5 s out."""
    server = Server(["--ttft-ms", "1500", "--tbt-ms", "1", "--target-tokens", "4", "--max-concurrency", "1",
                     "--max-queue", "0"])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(recorder, replaying server factory): record through `llmsim record`, then replay."""
    upstream = Server(["--profile", "instant", "--generator", "random"])
    out = tmp_path_factory.mktemp("fixtures")
    recorder = Recorder(upstream.url, out)
    started: list[Server] = []

    def replayer() -> Server:
        started.append(Server(["--replay", str(out), "--replay-strict", "--replay-speed", "0"]))
        return started[-1]
    yield recorder, replayer, out
    for server in started:
        server.stop()
    recorder.stop()
    upstream.stop()


# ---- capabilities -----------------------------------------------------------------------

@pytest.mark.parametrize("api", APIS)
def test_rate_limits(api, main):
    """The third request of a key in a minute is refused with the provider's 429."""
    driver, key = DRIVERS[api], _key()
    driver.ask(main, key=key)
    driver.ask(main, key=key)
    with pytest.raises(Failure) as caught:
        driver.ask(main, key=key)
    failure = caught.value
    assert failure.status == 429
    if ADAPTER[api].provider == "anthropic":
        assert driver.envelope(failure) == "rate_limit_error"
        assert failure.headers["anthropic-ratelimit-requests-limit"] == "2"
        assert int(failure.headers["retry-after"]) > 0
    elif ADAPTER[api].provider == "gemini":
        assert driver.envelope(failure) == "RESOURCE_EXHAUSTED"
        (retry,) = [d for d in failure.body["error"]["details"] if d["@type"].endswith("RetryInfo")]
        assert retry["retryDelay"].endswith("s")
    else:
        assert driver.error(failure)["code"] == "rate_limit_exceeded"
        if api != "websocket":          # (an error event carries no headers)
            assert failure.headers["x-ratelimit-limit-requests"] == "2"


@pytest.mark.parametrize("api", APIS)
def test_scenarios(api, main):
    _applies(api, "scripts", "a scenario")
    answer = DRIVERS[api].ask(main, headers={"x-llmsim-scenario": "matrix"})
    assert answer.text == SCRIPTED


@pytest.mark.parametrize("api", APIS)
def test_faults(api, main):
    driver = DRIVERS[api]
    with pytest.raises(Failure) as caught:
        driver.ask(main, headers={"x-llmsim-fault": "server_error"})
    assert caught.value.status == 500
    assert driver.envelope(caught.value) in ("server_error", "api_error", "INTERNAL")


@pytest.mark.parametrize("api", APIS)
def test_seeds(api, main):
    _applies(api, "seeded", "a seed")
    driver = DRIVERS[api]
    first, again, other = (driver.ask(main, headers={"x-llmsim-seed": seed}) for seed in ("7", "7", "8"))
    assert (first.text, first.ident) == (again.text, again.ident)
    assert (first.text, first.ident) != (other.text, other.ident)


@pytest.mark.parametrize("api", APIS)
def test_stats(api, main):
    """Counted by its model, and by its endpoint (a WebSocket's when its connection ends)."""
    driver, endpoint = DRIVERS[api], ADAPTER[api].endpoint

    def counts():
        stats = httpx.get(f"{main.url}/llmsim/stats").json()
        return (stats["models"].get(driver.model, {}).get("requests", 0),
                stats["endpoints"].get(endpoint, {}).get("requests", 0))
    models, endpoints = counts()
    driver.ask(main)
    assert counts() == (models + 1, endpoints + (api != "websocket"))


@pytest.mark.parametrize("api", APIS)
def test_live_config_reaches_every_worker(api, workers):
    """PATCH /llmsim/config on one worker: every request on either worker sees it."""
    driver = DRIVERS[api]
    assert httpx.patch(f"{workers.url}/llmsim/config", json={"errors": {"server_error": 1.0}}).status_code == 200
    try:
        for _ in range(6):              # (both workers, whichever accepts each connection)
            with pytest.raises(Failure) as caught:
                driver.ask(workers)
            assert caught.value.status == 500
    finally:
        assert httpx.delete(f"{workers.url}/llmsim/config").status_code == 200
    driver.ask(workers)


@pytest.mark.parametrize("api", APIS)
def test_serving_model(api, serving):
    """A model's one slot is held by an answer under way: another request gets the provider's 429."""
    _applies(api, "serves", "the serving model")
    driver = DRIVERS[api]
    held = threading.Thread(target=driver.ask, args=(serving,))
    held.start()
    try:
        time.sleep(0.5)
        with pytest.raises(Failure) as caught:
            driver.ask(serving)
        assert caught.value.status == 429
    finally:
        held.join()


@pytest.mark.parametrize("api", APIS)
def test_record_and_replay(api, recorded):
    _applies(api, "replays", "replay")
    recorder, replayer, out = recorded
    driver = DRIVERS[api]
    prompt = f"Replay me, {api}."
    live = driver.ask(recorder, prompt)
    Recorder.wait_for_fixtures(out, api)
    server = replayer()
    try:
        assert driver.ask(server, prompt).text == live.text
        with pytest.raises(Failure) as caught:
            driver.ask(server, "A request nobody recorded.")
        assert caught.value.status == 404
    finally:
        server.stop()


