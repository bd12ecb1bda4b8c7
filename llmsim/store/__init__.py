"""State for the Responses API: stored responses, their events, conversations.

`open_store(settings)` picks the backend from the `store` setting: a `redis://` (or
`rediss://`, `unix://`) URL selects Redis; `lmdb:DIR` an LMDB environment; anything else is
the path of an embedded SQLite file (`sqlite:` prefix optional); no setting at all is a
private in-memory SQLite (one process). `llmsim serve` always passes a path (by default a
temp LMDB directory), so its workers share one store.
Nothing connects until the first call.
"""
from __future__ import annotations

from llmsim.store.base import ACTIVE, Bounds, Conversation, Frames, Page, Store, StoredResponse, paginate

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")

__all__ = ["ACTIVE", "Bounds", "Conversation", "Frames", "Page", "Store", "StoredResponse", "open_store",
           "paginate"]


def open_store(settings) -> Store:
    bounds = Bounds(settings.store_max_entries, settings.store_ttl_s)
    target = settings.store
    if target and target.startswith(REDIS_SCHEMES):
        from llmsim.store.redis import RedisStore
        return RedisStore(target, bounds)
    if target and target.startswith("lmdb:"):
        from llmsim.store.lmdb import LmdbStore
        return LmdbStore(target.removeprefix("lmdb:").removeprefix("//"), bounds)
    from llmsim.store.sqlite import SqliteStore
    if target and target.startswith("sqlite:"):
        target = target.removeprefix("sqlite:").removeprefix("//")
    return SqliteStore(target or ":memory:", bounds)
