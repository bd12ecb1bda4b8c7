"""What the sweep of stopped servers' background responses reads from a shared store
(llmsim.state.background): the index of active responses, and the owners' leases."""
from __future__ import annotations

import asyncio

import pytest

from llmsim.state.store.base import Bounds, StoredResponse

BOUNDS = Bounds(100, None)


@pytest.fixture(params=["lmdb", "sqlite", "redis"])
def store_of(request, tmp_path):
    """`store_of(test)`: runs the coroutine function `test(store)`, then closes the store (in
    one event loop: Redis's connections belong to it)."""
    if request.param == "lmdb":
        from llmsim.state.store.lmdb import LmdbStore
        make = lambda: LmdbStore(str(tmp_path / "store"), BOUNDS)    # noqa: E731
    elif request.param == "sqlite":
        from llmsim.state.store.sqlite import SqliteStore
        make = lambda: SqliteStore(str(tmp_path / "store.sqlite3"), BOUNDS)    # noqa: E731
    else:
        import redis

        from llmsim.state.store.redis import RedisStore
        url = request.getfixturevalue("redis_url").rsplit("/", 1)[0] + "/6"
        redis.Redis.from_url(url).flushdb()
        make = lambda: RedisStore(url, BOUNDS)    # noqa: E731

    def run(test) -> None:
        async def go():
            store = make()
            try:
                await test(store)
            finally:
                await store.close()
        asyncio.run(go())
    return run


def running(response_id: str, owner: str) -> StoredResponse:
    return StoredResponse(response_id, {"id": response_id, "status": "in_progress"}, background=True, owner=owner)


def test_only_responses_still_running_are_listed_with_their_owner(store_of):
    async def go(store):
        await store.put_response(running("resp_a", "host|boot|ns|1|2"))
        await store.put_response(running("resp_b", "host|boot|ns|1|2"))
        await store.put_response(StoredResponse("resp_c", {"id": "resp_c", "status": "completed"}))
        assert await store.append_events("resp_b", [b"data: {}\n\n"], {"id": "resp_b", "status": "completed"})
        await store.put_response(running("resp_d", "other|boot|ns|3|4"))
        await store.delete_response("resp_d")
        assert await store.active_responses() == ["resp_a"]
        assert (await store.get_response("resp_a")).owner == "host|boot|ns|1|2"
    store_of(go)


def test_a_lease_lives_until_it_runs_out(store_of):
    async def go(store):
        await store.renew_lease("fresh", 5)
        await store.renew_lease("short", 0.05)
        assert await store.live_owners(["fresh", "short", "never"]) == {"fresh", "short"}
        await asyncio.sleep(0.1)
        assert await store.live_owners(["fresh", "short", "never"]) == {"fresh"}
    store_of(go)
