"""The memory store (one worker's default), in process: the oldest entries go beyond
`max_entries`, with what hangs off them; expired entries read as missing and are swept;
readers get copies; several workers refuse it (tests/state/test_store_backends.py: what every
backend does)."""
from __future__ import annotations

import subprocess
import sys

import pytest

import llmsim.state.store.memory as memory_store
from llmsim.settings import Settings
from llmsim.state.store import Bounds, Conversation, StoredResponse, open_store
from llmsim.state.store.memory import MemoryStore


def record(n: int, status: str = "completed") -> StoredResponse:
    return StoredResponse(f"resp_{n}", {"id": f"resp_{n}", "status": status, "output": []},
                          [{"id": f"msg_{n}", "role": "user", "content": "hi"}])


def frames(*names: str) -> list[bytes]:
    return [b'event: %s\ndata: {"type":"%s"}\n\n' % (name.encode(), name.encode()) for name in names]


def test_no_store_setting_is_the_memory_store():
    assert isinstance(open_store(Settings()), MemoryStore)
    assert isinstance(open_store(Settings(store="memory")), MemoryStore)


@pytest.mark.live
def test_serve_refuses_a_memory_store_for_several_workers_by_name():
    result = subprocess.run([sys.executable, "-m", "llmsim", "serve", "--port", "0", "--store", "memory",
                             "--workers", "2"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "'memory' is private to one process" in result.stderr and "Traceback" not in result.stderr


async def test_a_stored_response_reads_back_with_its_input_items_and_frames():
    store = MemoryStore(Bounds(10, None))
    await store.put_response(record(1), frames("created", "completed"))
    got = await store.get_response("resp_1")
    assert (got.response, got.input_items, got.events) == (
        {"id": "resp_1", "status": "completed", "output": []},
        [{"id": "msg_1", "role": "user", "content": "hi"}], 2)
    assert await store.events("resp_1", 0) == (frames("completed"), "completed")


async def test_the_oldest_responses_go_beyond_max_entries_with_their_frames():
    store = MemoryStore(Bounds(3, None))
    for n in range(6):
        await store.put_response(record(n), frames("a"))
    assert [await store.get_response(f"resp_{n}") is None for n in range(6)] == [True] * 3 + [False] * 3
    assert await store.events("resp_1", -1) == ([], None)
    assert await store.events("resp_5", -1) == (frames("a"), "completed")


async def test_replacing_a_response_makes_it_the_newest():
    store = MemoryStore(Bounds(2, None))
    await store.put_response(record(1), frames("old"))
    await store.put_response(record(2))
    await store.put_response(record(1), frames("new"))      # now newer than resp_2
    await store.put_response(record(3))
    assert await store.get_response("resp_2") is None
    assert await store.events("resp_1", -1) == (frames("new"), "completed")


async def test_an_evicted_conversation_takes_its_items():
    store = MemoryStore(Bounds(1, None))
    await store.put_conversation(Conversation("conv_1", 1, {}))
    await store.add_items("conv_1", [{"id": "msg_1", "type": "message"}])
    await store.put_conversation(Conversation("conv_2", 2, {}))
    assert await store.get_conversation("conv_1") is None
    assert await store.conversation_items("conv_1") is None
    assert await store.get_item("conv_1", "msg_1") is None


async def test_expired_entries_read_as_missing_and_are_swept(monkeypatch):
    monkeypatch.setattr(memory_store, "SWEEP_EVERY", 4)
    clock = [1000.0]
    monkeypatch.setattr(memory_store.time, "time", lambda: clock[0])
    store = MemoryStore(Bounds(100, 10.0))
    await store.put_response(record(1))
    await store.put_conversation(Conversation("conv_1", 1, {}))
    clock[0] += 11
    assert await store.get_response("resp_1") is None
    assert await store.get_conversation("conv_1") is None
    assert not await store.delete_response("resp_1")
    for n in range(2, 4):                       # the fourth write sweeps
        await store.put_response(record(n))
    assert list(store._responses) == ["resp_2", "resp_3"]    # gone, not just unreadable
    assert list(store._conversations) == []


async def test_a_write_keeps_an_entry_alive_for_another_ttl(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(memory_store.time, "time", lambda: clock[0])
    store = MemoryStore(Bounds(100, 10.0))
    await store.put_response(record(1, "in_progress"), frames("created"))
    await store.put_conversation(Conversation("conv_1", 1, {}))
    clock[0] += 8
    assert await store.append_events("resp_1", frames("delta"))
    assert await store.add_items("conv_1", [{"id": "msg_1"}])
    clock[0] += 8
    assert (await store.get_response("resp_1")).events == 2
    assert await store.conversation_items("conv_1") == [{"id": "msg_1"}]


async def test_what_a_reader_changes_is_not_stored():
    store = MemoryStore(Bounds(10, None))
    await store.put_response(record(1))
    await store.put_conversation(Conversation("conv_1", 1, {}))
    await store.add_items("conv_1", [{"id": "msg_1", "content": "kept"}])
    (await store.get_response("resp_1")).response["status"] = "changed"
    (await store.conversation_items("conv_1"))[0]["content"] = "changed"
    (await store.get_item("conv_1", "msg_1"))["id"] = "changed"
    assert (await store.get_response("resp_1")).status == "completed"
    assert await store.conversation_items("conv_1") == [{"id": "msg_1", "content": "kept"}]


async def test_a_stored_response_holds_about_its_own_size_not_the_serialiser_buffer():
    import tracemalloc

    import orjson
    store = MemoryStore(Bounds(1000, None))
    answer = {"id": "resp_x", "status": "completed", "output": [{"text": "x" * 1300}]}
    records = [StoredResponse(f"resp_{n}", None, [], response_json=orjson.dumps(answer),
                              status="completed") for n in range(200)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for one in records:
            await store.put_response(one)
        del records, one
        held = (tracemalloc.get_traced_memory()[0] - before) / 200
    finally:
        tracemalloc.stop()
    assert held < 2 * len(orjson.dumps(answer))      # orjson's own buffer is ~8 KB


async def test_a_reader_changing_the_input_items_it_read_changes_nothing_kept():
    store = MemoryStore(Bounds(10, None))
    await store.put_response(record(1))
    (await store.get_response("resp_1")).input_items[0]["content"] = "changed"
    assert (await store.get_response("resp_1")).input_items == [{"id": "msg_1", "role": "user", "content": "hi"}]
