"""Admin access, seen against live servers: with keys configured, llmsim's own routes that
change behaviour need the admin key (or, without one, an API key) and the read-only ones
stay open unless --protect-stats; WebSocket upgrades need the key HTTP needs; no key ever
reaches the logs, the trace or the stats."""
from __future__ import annotations

import json

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from conftest import LiveServer

pytestmark = pytest.mark.live

API_KEY = "sk-user-0123456789abcdef"
ADMIN_KEY = "adm-secret-fedcba9876543210"
WRONG_KEY = "sk-wrong-5555555555555555"
FAULTS = "/llmsim/faults"
SCHEDULE = {"schedule": [{"kind": "rate_limit", "count": 1}]}


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """Keys configured, an admin key among them, logs and a trace on."""
    trace = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    server = LiveServer("--profile", "instant", "--api-key", API_KEY, "--admin-key", ADMIN_KEY,
                        "--log-format", "json", "--log-level", "debug", "--trace", str(trace))
    server.trace = trace
    yield server
    server.stop()


@pytest.fixture(scope="module")
def protected():
    """API keys only (no admin key) and --protect-stats."""
    server = LiveServer("--profile", "instant", "--api-key", API_KEY, "--protect-stats")
    yield server
    server.stop()


def call(server, method: str, path: str, key: str | None = None, **kwargs) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.request(method, server.url + path, headers=headers, timeout=10, **kwargs)


def assert_401(answer: httpx.Response) -> None:
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith("application/json")
    error = answer.json()["error"]
    assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
    assert error["message"]


@pytest.mark.parametrize("method", ["POST", "DELETE"])
def test_changing_routes_refuse_a_request_without_a_key(locked, method):
    assert_401(call(locked, method, FAULTS, json=SCHEDULE))


@pytest.mark.parametrize("method", ["POST", "DELETE"])
def test_changing_routes_refuse_an_api_key_when_an_admin_key_is_set(locked, method):
    assert_401(call(locked, method, FAULTS, API_KEY, json=SCHEDULE))
    assert_401(call(locked, method, FAULTS, WRONG_KEY, json=SCHEDULE))


def test_the_admin_key_changes_behaviour_and_the_sdk_sees_it(locked):
    answer = call(locked, "POST", FAULTS, ADMIN_KEY, json=SCHEDULE)
    assert answer.status_code == 200
    import openai
    client = openai.OpenAI(base_url=locked.base, api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="gpt-4o", input="hi")
    assert client.responses.create(model="gpt-4o", input="hi").status == "completed"
    assert call(locked, "DELETE", FAULTS, ADMIN_KEY).status_code == 200


def test_a_refused_admin_request_changes_nothing(locked):
    before = call(locked, "GET", FAULTS).json()
    assert_401(call(locked, "POST", FAULTS, API_KEY, json={"errors": {"server_error": 1.0}}))
    assert call(locked, "GET", FAULTS).json()["rates"] == before["rates"]


@pytest.mark.parametrize("path", ["/llmsim/stats", "/llmsim/metrics", "/metrics", "/health", FAULTS])
def test_read_only_routes_stay_open(locked, path):
    assert call(locked, "GET", path).status_code == 200


@pytest.mark.parametrize("path", ["/llmsim/stats", "/llmsim/metrics", "/metrics", FAULTS])
def test_protect_stats_closes_the_read_only_routes(protected, path):
    assert_401(call(protected, "GET", path))
    assert_401(call(protected, "GET", path, WRONG_KEY))
    assert call(protected, "GET", path, API_KEY).status_code == 200


def test_health_stays_open_with_protect_stats_for_readiness_probes(protected):
    assert call(protected, "GET", "/health").status_code == 200


def test_without_an_admin_key_an_api_key_changes_behaviour(protected):
    assert_401(call(protected, "DELETE", FAULTS))
    assert call(protected, "DELETE", FAULTS, API_KEY).status_code == 200


def ws_url(server, path="/v1/responses") -> str:
    return server.url.replace("http://", "ws://") + path


async def test_a_websocket_upgrade_without_the_key_is_refused_as_http_is(locked):
    for headers in ({}, {"Authorization": f"Bearer {WRONG_KEY}"}):
        with pytest.raises(InvalidStatus) as exc:
            async with connect(ws_url(locked), additional_headers=headers):
                pass
        assert exc.value.response.status_code == 401
        assert json.loads(exc.value.response.body)["error"]["code"] == "invalid_api_key"


async def test_a_websocket_upgrade_with_the_key_is_served(locked):
    create = json.dumps({"type": "response.create", "model": "gpt-4o-mini", "input": "Hi."})
    async with connect(ws_url(locked), additional_headers={"Authorization": f"Bearer {API_KEY}"}) as ws:
        await ws.send(create)
        while (event := json.loads(await ws.recv()))["type"] != "response.completed":
            assert event["type"] != "error"


def test_no_key_reaches_the_logs_the_trace_or_the_stats(locked):
    import openai
    for key in (API_KEY, WRONG_KEY):
        client = openai.OpenAI(base_url=locked.base, api_key=key, max_retries=0)
        try:
            client.responses.create(model="gpt-4o", input="hi", stream=False)
        except openai.AuthenticationError:
            pass
        call(locked, "POST", FAULTS, key, json=SCHEDULE)
    call(locked, "DELETE", FAULTS, ADMIN_KEY)
    stats = call(locked, "GET", "/llmsim/stats").text + call(locked, "GET", "/metrics").text
    import time
    deadline = time.monotonic() + 10      # the trace is flushed within a fraction of a second
    while time.monotonic() < deadline and '"status":401' not in locked.trace.read_text().replace(" ", ""):
        time.sleep(0.1)
    trace = locked.trace.read_text()
    assert "/v1/responses" in trace and '"status":401' in trace.replace(" ", "")
    for where, text in (("log", locked.output()), ("trace", trace), ("stats", stats)):
        for secret in (API_KEY, WRONG_KEY, ADMIN_KEY, API_KEY[-8:], ADMIN_KEY[-8:]):
            assert secret not in text, f"{secret!r} in the {where}"
    assert "authorization: [redacted]" in locked.output().lower()     # the debug log of an upgrade


def test_every_key_is_compared_in_constant_time(monkeypatch):
    """Every configured key goes through hmac.compare_digest, the matching one first or not."""
    from llmsim.api import guard
    from llmsim.settings import Settings
    compared = []

    def compare(a, b):
        compared.append(b)
        return a == b
    monkeypatch.setattr(guard.hmac, "compare_digest", compare)
    keys = ["k1-aaaaaaaa", "k2-bbbbbbbb", "k3-cccccccc"]
    gate = guard.Guard(settings=Settings(api_keys=keys, admin_key="adm-zzzzzzzz"), base_paths=("/v1",),
                       admin=lambda path: path.startswith("/llmsim/"), access=guard.Access())
    gate.check({"type": "http", "path": "/v1/models", "method": "GET"}, {b"authorization": b"Bearer k1-aaaaaaaa"})
    assert compared == [key.encode() for key in keys]
    compared.clear()
    gate.check({"type": "http", "path": "/llmsim/faults", "method": "DELETE"},
               {b"authorization": b"Bearer adm-zzzzzzzz"})
    assert compared == [b"adm-zzzzzzzz"]
