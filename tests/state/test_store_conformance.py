"""Every store (memory, LMDB, SQLite, Redis) behind a live `llmsim serve`, seen through the
official SDK: the same stored responses, chains, deletions, background runs, conversations
and stored streams, whichever store keeps them.

`llmsim serve` starts a request whose body came with its headers at once, outside an asyncio
task, until it first waits (llmsim.server.starting); under `--profile instant` a stored response is
written to the store before anything waits. The SDK's own transport (httpx) sends a body
apart from its headers, so these tests give it one that writes each request in one piece, as
curl and load generators do, and every store call of these requests runs on that path.
The plain server (`--server plain`: none of that) runs them too, on two of the stores.
"""
from __future__ import annotations

import http.client
import time

import httpx
import openai
import pytest

MODEL = "gpt-4o"
STORES = ["memory", "lmdb", "sqlite", "redis"]
# (store, `--server`): every store on the tuned server; the plain server on two of them
SERVED = [*((store, "tuned") for store in STORES), ("memory", "plain"), ("redis", "plain")]


class OnePieceTransport(httpx.BaseTransport):
    """httpx's transport through `http.client`, which sends a request's head and body in one
    write (a new connection per request)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        conn = http.client.HTTPConnection(request.url.host, request.url.port, timeout=30)
        conn.request(request.method, request.url.raw_path.decode("ascii"), body=request.read(),
                     headers=dict(request.headers))
        answer = conn.getresponse()
        return httpx.Response(answer.status, headers=answer.getheaders(), stream=_Body(conn, answer))


class _Body(httpx.SyncByteStream):
    def __init__(self, conn: http.client.HTTPConnection, answer: http.client.HTTPResponse):
        self.conn, self.answer = conn, answer

    def __iter__(self):
        while chunk := self.answer.read1(65536):
            yield chunk

    def close(self) -> None:
        self.conn.close()


@pytest.fixture(scope="module", params=SERVED, ids="-".join)
def sdk(request, live_server_factory, tmp_path_factory):
    """The SDK against `llmsim serve --profile instant` on one store and server."""
    kind, server = request.param
    if kind == "memory":
        store = "memory"
    elif kind == "lmdb":
        store = f"lmdb:{tmp_path_factory.mktemp('conformance') / 'store.lmdb'}"
    elif kind == "sqlite":
        store = str(tmp_path_factory.mktemp("conformance") / "store.sqlite3")
    else:
        store = request.getfixturevalue("redis_url")
    served = live_server_factory("--profile", "instant", "--store", store, "--server", server)
    return served.client(http_client=httpx.Client(transport=OnePieceTransport()))


def test_a_stored_response_is_retrieved(sdk):
    created = sdk.responses.create(model=MODEL, input="Keep this one.")
    got = sdk.responses.retrieve(created.id)
    assert (got.id, got.status, got.output_text) == (created.id, "completed", created.output_text)


def test_a_stored_response_lists_its_input_items(sdk):
    created = sdk.responses.create(model=MODEL, input=[
        {"role": "user", "content": "First line."}, {"role": "user", "content": "Second line."}])
    listed = sdk.responses.input_items.list(created.id, order="asc")
    assert [item.content[0].text for item in listed] == ["First line.", "Second line."]


def test_previous_response_id_continues_the_stored_history(sdk):
    first = sdk.responses.create(model=MODEL, input="Start here.")
    second = sdk.responses.create(model=MODEL, input="Go on.", previous_response_id=first.id)
    explicit = sdk.responses.create(model=MODEL, input=[
        {"role": "user", "content": "Start here."}, {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "Go on."}])
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens == explicit.usage.input_tokens


def test_a_deleted_response_is_gone(sdk):
    created = sdk.responses.create(model=MODEL, input="Delete me.")
    sdk.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)


def test_a_background_response_is_polled_to_completed(sdk):
    queued = sdk.responses.create(model=MODEL, input="Run in the background.", background=True)
    assert queued.background is True
    deadline = time.monotonic() + 30
    while (got := sdk.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, f"still {got.status}"
        time.sleep(0.05)
    assert got.status == "completed"
    assert got.output_text


def test_a_conversation_keeps_its_items_and_the_responses_in_it(sdk):
    conversation = sdk.conversations.create(items=[{"role": "user", "content": "Hello."}])
    response = sdk.responses.create(model=MODEL, input="And again.", conversation=conversation.id)
    items = [(item.role, item.content[0].text)
             for item in sdk.conversations.items.list(conversation.id, order="asc")]
    assert items == [("user", "Hello."), ("user", "And again."), ("assistant", response.output_text)]


def test_a_streamed_stored_response_is_retrieved(sdk):
    with sdk.responses.create(model=MODEL, input="Stream and keep.", stream=True) as stream:
        events = list(stream)
    assert events[-1].type == "response.completed"
    streamed = events[-1].response
    got = sdk.responses.retrieve(streamed.id)
    assert (got.status, got.output_text) == ("completed", streamed.output_text)
    assert [e.sequence_number for e in sdk.responses.retrieve(streamed.id, stream=True)] == \
        [e.sequence_number for e in events]

