"""Webhooks of background responses, against live servers through the official SDK: a small
receiver on 127.0.0.1 gets OpenAI's events, which `client.webhooks.unwrap` verifies; a
delivery answered 500 comes again with the same webhook-id; faults delay and duplicate
deliveries; a pending delivery survives a SIGKILL on a SQLite store."""
from __future__ import annotations

import base64
import http.server
import threading
import time

import httpx
import openai
import pytest

from conftest import LiveServer
from oai_schemas import validate

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

SECRET = "whsec_" + base64.b64encode(b"llmsim webhook test key, 32 byte").decode()
MODEL = "gpt-4o"
SCHEMAS = {"response.completed": "WebhookResponseCompleted", "response.failed": "WebhookResponseFailed",
           "response.cancelled": "WebhookResponseCancelled", "response.incomplete": "WebhookResponseIncomplete"}


class Receiver:
    """An HTTP server in a thread that keeps every POST (headers, body) and answers each with
    the next status of `answers` (200 once they are used up)."""

    def __init__(self):
        self.received: list[tuple[dict, bytes]] = []
        self.answers: list[int] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver.lock:
                    receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    status = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def deliveries(self, response_id: str) -> list[tuple[dict, bytes]]:
        with self.lock:
            return [(h, b) for h, b in self.received if f'"{response_id}"'.encode() in b]

    def wait_for(self, response_id: str, count: int = 1, timeout: float = 20) -> list[tuple[dict, bytes]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.deliveries(response_id)
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(f"{len(self.deliveries(response_id))} deliveries for {response_id}, "
                             f"expected {count}")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def unwrap(client, delivery):
    headers, body = delivery
    event = client.webhooks.unwrap(body, headers, secret=SECRET)
    validate(SCHEMAS[event.type], httpx.Response(200, content=body).json())
    return event


def webhook_stats(server) -> dict:
    return httpx.get(f"{server.url}/llmsim/stats", trust_env=False).json()["webhooks"]


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def server(receiver):
    s = LiveServer("--ttft-ms", "1000", "--tbt-ms", "5", "--target-tokens", "20", "--webhook-url", receiver.url,
                   "--webhook-secret", SECRET, "--webhook-backoff-s", "0.2")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def test_a_finished_background_response_sends_a_webhook_that_unwrap_verifies(client, receiver):
    queued = client.responses.create(model=MODEL, input="Tell me later.", background=True)
    [delivery] = receiver.wait_for(queued.id)
    event = unwrap(client, delivery)
    assert (event.type, event.data.id, event.object) == ("response.completed", queued.id, "event")
    assert event.id.startswith("evt_")
    assert client.responses.retrieve(queued.id).status == "completed"


def test_a_tampered_webhook_does_not_verify(client, receiver):
    queued = client.responses.create(model=MODEL, input="Tamper with me.", background=True)
    [(headers, body)] = receiver.wait_for(queued.id)
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.unwrap(body.replace(b"response.completed", b"response.failed"), headers, secret=SECRET)


def test_a_delivery_answered_500_comes_again_with_the_same_webhook_id(client, receiver, server):
    before = webhook_stats(server)
    receiver.answers.append(500)
    queued = client.responses.create(model=MODEL, input="Retry me.", background=True)
    first, second = receiver.wait_for(queued.id, 2)
    assert first[0]["webhook-id"] == second[0]["webhook-id"]
    assert unwrap(client, second).data.id == queued.id
    after = webhook_stats(server)
    assert {k: after[k] - before[k] for k in after} == {"queued": 1, "sent": 2, "failed": 1,
                                                        "delivered": 1, "dropped": 0}


def test_a_cancelled_background_response_sends_response_cancelled(client, receiver):
    queued = client.responses.create(model=MODEL, input="Never mind.", background=True)
    client.responses.cancel(queued.id)
    [delivery] = receiver.wait_for(queued.id)
    event = unwrap(client, delivery)
    assert (event.type, event.data.id) == ("response.cancelled", queued.id)
    time.sleep(0.5)                     # past its end had it run: no second event
    assert len(receiver.deliveries(queued.id)) == 1


def test_an_incomplete_background_response_sends_response_incomplete(client, receiver):
    queued = client.responses.create(model=MODEL, input="Say a lot.", background=True, max_output_tokens=16)
    [delivery] = receiver.wait_for(queued.id)
    event = unwrap(client, delivery)
    assert (event.type, event.data.id) == ("response.incomplete", queued.id)
    assert client.responses.retrieve(queued.id).status == "incomplete"


def test_a_background_response_failed_by_a_fault_sends_response_failed(client, receiver, server):
    httpx.post(f"{server.url}/llmsim/faults", json={"schedule": [{"kind": "stream_failed", "count": 1}]},
               trust_env=False).raise_for_status()
    with client.responses.create(model=MODEL, input="Fail midway.", background=True, stream=True) as events:
        queued = next(iter(events)).response          # (a stream fault fails streamed requests only)
    [delivery] = receiver.wait_for(queued.id)
    event = unwrap(client, delivery)
    assert (event.type, event.data.id) == ("response.failed", queued.id)
    assert client.responses.retrieve(queued.id).status == "failed"


def test_a_foreground_response_sends_no_webhook(client, receiver):
    answered = client.responses.create(model=MODEL, input="Right now.")
    time.sleep(0.5)
    assert receiver.deliveries(answered.id) == []


def test_deliveries_show_in_the_metrics(client, receiver, server):
    queued = client.responses.create(model=MODEL, input="Count me.", background=True)
    receiver.wait_for(queued.id)
    metrics = httpx.get(f"{server.url}/metrics", trust_env=False).text
    delivered = [line for line in metrics.splitlines()
                 if line.startswith('llmsim_webhook_deliveries_total{outcome="delivered"}')]
    assert delivered and float(delivered[0].split()[-1]) >= 1


def test_a_delivery_never_answered_2xx_is_dropped_after_its_attempts(receiver):
    with LiveServer("--profile", "instant", "--webhook-url", receiver.url, "--webhook-secret", SECRET,
                    "--webhook-attempts", "3", "--webhook-backoff-s", "0.05") as server:
        receiver.answers.extend([503, 503, 503])
        queued = server.client().responses.create(model=MODEL, input="Give up.", background=True)
        deliveries = receiver.wait_for(queued.id, 3)
        assert len({headers["webhook-id"] for headers, _ in deliveries}) == 1
        deadline = time.monotonic() + 10
        while webhook_stats(server)["dropped"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert webhook_stats(server) == {"queued": 1, "sent": 3, "failed": 3, "delivered": 0, "dropped": 1}


def test_the_duplicate_fault_delivers_an_event_twice_with_the_same_webhook_id(receiver):
    with LiveServer("--profile", "instant", "--webhook-url", receiver.url, "--webhook-secret", SECRET,
                    "--webhook-faults", "duplicate=1") as server:
        client = server.client()
        queued = client.responses.create(model=MODEL, input="Twice.", background=True)
        first, second = receiver.wait_for(queued.id, 2)
        assert first[0]["webhook-id"] == second[0]["webhook-id"]
        assert unwrap(client, first).id == unwrap(client, second).id      # the same event


def test_the_delay_fault_holds_a_delivery_back(receiver):
    with LiveServer("--profile", "instant", "--webhook-url", receiver.url, "--webhook-secret", SECRET,
                    "--webhook-faults", "delay_ms=1000") as server:
        client = server.client()
        started = time.monotonic()
        queued = client.responses.create(model=MODEL, input="Later.", background=True)
        assert client.responses.retrieve(queued.id).status == "completed"
        receiver.wait_for(queued.id)
        assert time.monotonic() - started >= 1.0


@pytest.mark.parametrize("kind", ["sqlite", "lmdb", "redis"])
def test_a_pending_delivery_is_sent_after_a_sigkill_and_restart(kind, receiver, tmp_path, request):
    store = {"sqlite": f"sqlite:{tmp_path / 'state.db'}", "lmdb": f"lmdb:{tmp_path / 'state.lmdb'}"}.get(kind) \
        or request.getfixturevalue("redis_url")
    args = ("--profile", "instant", "--store", store, "--webhook-url", receiver.url,
            "--webhook-secret", SECRET, "--webhook-backoff-s", "30")
    receiver.answers.append(500)                      # the first try fails; the retry is 30 s away
    crashed = LiveServer(*args)
    try:
        queued = crashed.client().responses.create(model=MODEL, input="Survive.", background=True)
        [(headers, _)] = receiver.wait_for(queued.id)
    finally:
        crashed.proc.kill()
        crashed.proc.wait()
    with LiveServer(*args) as restarted:
        first, again = receiver.wait_for(queued.id, 2)
        assert again[0]["webhook-id"] == headers["webhook-id"]
        event = unwrap(restarted.client(), again)
        assert (event.type, event.data.id) == ("response.completed", queued.id)
        deadline = time.monotonic() + 10
        while webhook_stats(restarted)["delivered"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert webhook_stats(restarted)["delivered"] == 1
    if kind == "sqlite":
        with LiveServer(*args):                       # delivered: the outbox no longer holds it
            time.sleep(1)
            assert len(receiver.deliveries(queued.id)) == 2


def test_webhook_urls_without_a_secret_are_a_configuration_error(receiver):
    with pytest.raises(RuntimeError, match="configuration error: webhook_secret"):
        LiveServer("--profile", "instant", "--webhook-url", receiver.url)


@pytest.mark.parametrize("secret, message", [("whsec_not*base64", "not valid base64"),
                                             (None, "need a signing secret")])
def test_a_bad_webhook_configuration_fails_at_start(secret, message):
    from llmsim.app import create_app
    from llmsim.errors import ConfigError
    from llmsim.settings import Settings
    with pytest.raises(ConfigError, match=message):
        create_app(Settings(webhook_urls=["http://127.0.0.1:9/hook"], webhook_secret=secret))


def test_webhook_urls_come_from_the_environment_as_a_comma_list():
    from llmsim.settings import Settings
    settings = Settings.load({}, environ={"LLMSIM_WEBHOOK_URLS": "http://127.0.0.1:1/a, http://127.0.0.1:2/b",
                                         "LLMSIM_WEBHOOK_SECRET": "12345"})
    assert settings.webhook_urls == ["http://127.0.0.1:1/a", "http://127.0.0.1:2/b"]
    assert settings.webhook_secret == "12345"
