"""Several processes share one store, seen through the official SDK: two llmsim servers on one
LMDB store, two on one SQLite file, two on one Redis (conftest's `redis-server`), and `--workers 2` on
one port. What one process stores, the other retrieves, continues and cancels."""
from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

MODEL = "gpt-4o"


@pytest.fixture(scope="module", params=["lmdb", "sqlite", "redis"])
def pair(request, live_server_factory, tmp_path_factory):
    """Two separate llmsim processes sharing one store."""
    if request.param == "lmdb":
        store = f"lmdb:{tmp_path_factory.mktemp('shared') / 'store.lmdb'}"
    elif request.param == "sqlite":
        store = str(tmp_path_factory.mktemp("shared") / "store.sqlite3")
    else:
        store = request.getfixturevalue("redis_url")
    flags = ("--ttft-ms", "300", "--tbt-ms", "20", "--target-tokens", "30", "--store", store)
    return live_server_factory(*flags), live_server_factory(*flags)


def test_a_response_stored_by_one_process_is_retrieved_by_the_other(pair):
    one, other = pair[0].client(), pair[1].client()
    created = one.responses.create(model=MODEL, input="Made on one.")
    got = other.responses.retrieve(created.id)
    assert (got.id, got.output_text) == (created.id, created.output_text)
    assert [i.content[0].text for i in other.responses.input_items.list(created.id)] == ["Made on one."]


def test_the_other_process_continues_the_chain(pair):
    one, other = pair[0].client(), pair[1].client()
    first = one.responses.create(model=MODEL, input="Start here.")
    second = other.responses.create(model=MODEL, input="Go on.", previous_response_id=first.id)
    explicit = one.responses.create(model=MODEL, input=[
        {"role": "user", "content": "Start here."}, {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "Go on."}])
    assert second.usage.input_tokens == explicit.usage.input_tokens


def test_a_conversation_is_shared(pair):
    one, other = pair[0].client(), pair[1].client()
    conversation = one.conversations.create(items=[{"role": "user", "content": "Hello from one."}])
    response = other.responses.create(model=MODEL, input="Hello from the other.", conversation=conversation.id)
    items = [(i.role, i.content[0].text) for i in one.conversations.items.list(conversation.id, order="asc")]
    assert items == [("user", "Hello from one."), ("user", "Hello from the other."),
                     ("assistant", response.output_text)]


def test_concurrent_writes_from_both_processes_all_land_intact(pair):
    from concurrent.futures import ThreadPoolExecutor
    conversation = pair[0].client().conversations.create()
    clients = [server.client() for server in pair]

    def add(n: int):
        return clients[n % 2].conversations.items.create(
            conversation.id, items=[{"role": "user", "content": f"item {n}"}]).data[0].id
    with ThreadPoolExecutor(16) as pool:
        added = set(pool.map(add, range(40)))
    listed = list(clients[1].conversations.items.list(conversation.id, limit=100))
    assert {i.id for i in listed} == added
    assert sorted(i.content[0].text for i in listed) == sorted(f"item {n}" for n in range(40))


def test_a_deletion_is_seen_by_the_other_process(pair):
    one, other = pair[0].client(), pair[1].client()
    created = one.responses.create(model=MODEL, input="Delete me elsewhere.")
    other.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        one.responses.retrieve(created.id)


def test_a_background_response_is_polled_and_cancelled_from_the_other_process(pair):
    one, other = pair[0].client(), pair[1].client()
    queued = one.responses.create(model=MODEL, input="Run on one.", background=True)
    assert other.responses.retrieve(queued.id).status in ("queued", "in_progress")
    cancelled = other.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    time.sleep(1.0)                                # past the time it would have finished
    assert one.responses.retrieve(queued.id).status == "cancelled"


def test_a_background_stream_resumes_on_the_other_process(pair):
    one, other = pair[0].client(), pair[1].client()
    with one.responses.create(model=MODEL, input="Resume elsewhere.", background=True, stream=True) as stream:
        head = []
        for event in stream:
            head.append(event.to_dict())
            if event.type == "response.output_text.delta":
                break
    rest = [e.to_dict() for e in other.responses.retrieve(head[0]["response"]["id"], stream=True,
                                                          starting_after=head[-1]["sequence_number"])]
    whole = head + rest
    assert [e["sequence_number"] for e in whole] == list(range(len(whole)))
    assert rest[-1]["type"] == "response.completed"


def test_the_websocket_mode_continues_a_response_stored_by_the_other_process(pair):
    first = pair[0].client().responses.create(model=MODEL, input="Stored over HTTP.")
    with pair[1].client().responses.connect() as conn:
        conn.response.create(model=MODEL, input="Continued over a WebSocket.", previous_response_id=first.id)
        for event in conn:
            if event.type in ("response.completed", "response.failed", "error"):
                break
    assert event.type == "response.completed", event
    assert event.response.previous_response_id == first.id
    assert event.response.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_workers_on_one_port_share_the_embedded_store(live_server_factory):
    server = live_server_factory("--profile", "instant", "--workers", "2")
    created = server.client().responses.create(model=MODEL, input="Made by one worker.")
    statuses = set()
    for _ in range(40):       # a new connection each time: the kernel spreads them over the workers
        with httpx.Client() as fresh:
            statuses.add(fresh.get(f"{server.base}/responses/{created.id}").status_code)
    assert statuses == {200}


async def test_flushing_a_redis_store_waits_for_its_batched_writes(redis_url):
    from llmsim.state.store import Bounds, StoredResponse
    from llmsim.state.store.redis import RedisStore
    store = RedisStore(redis_url, Bounds(100, None))
    writes = [asyncio.ensure_future(store.put_response(StoredResponse(f"resp_flush_{n}", {"status": "completed"})))
              for n in range(20)]
    await asyncio.sleep(0)                  # the first goes alone, the rest queue behind it
    await store.flush()
    assert all(write.done() for write in writes)
    await store.close()
