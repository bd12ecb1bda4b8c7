"""State for the Responses API: stored responses, their events, conversations.

`open_store(settings)` picks the backend from the `store` setting: a `redis://` (or
`rediss://`, `unix://`) URL selects Redis; `lmdb:DIR` an LMDB environment; `memory` (or no
setting at all) the dicts of this one process; anything else is the path of an embedded
SQLite file (`sqlite:` prefix optional). `llmsim serve --workers N` passes a path when none
is set (a temp LMDB directory), so its workers share one store.
Nothing connects until the first call.
"""
from __future__ import annotations

from llmsim.errors import ConfigError
from llmsim.state.store.capabilities import Capabilities
from llmsim.state.store.base import ACTIVE, Bounds, Conversation, Frames, Page, Store, StoredResponse, paginate

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
MEMORY = "memory"

__all__ = ["ACTIVE", "Bounds", "Capabilities", "Conversation", "Frames", "Page", "Store", "StoredResponse", "open_store",
           "paginate"]


def open_store(settings) -> Store:
    """The store the settings name, its capabilities checked (llmsim.state.store.capabilities)."""
    store = _open(settings)
    store.capabilities.check(type(store).__name__)
    return store


def _open(settings) -> Store:
    bounds = Bounds(settings.store_max_entries, settings.store_ttl_s, settings.store_evict_when_full)
    target = settings.store
    if target is None or target == MEMORY:
        if settings.workers > 1:
            raise ConfigError(f"store: {MEMORY!r} is private to one process; --workers {settings.workers} "
                              "need a store they share: leave --store out (a temp LMDB store) or name "
                              "lmdb:DIR, a SQLite file or a redis:// URL")
        from llmsim.state.store.memory import MemoryStore
        return MemoryStore(bounds)
    if target.startswith(REDIS_SCHEMES):
        from llmsim.state.store.redis import RedisStore
        return RedisStore(target, bounds)
    if target.startswith("lmdb:"):
        from llmsim.state.store.lmdb import LmdbStore
        return LmdbStore(target.removeprefix("lmdb:").removeprefix("//"), bounds, settings.store_max_bytes)
    from llmsim.state.store.sqlite import SqliteStore
    if target.startswith("sqlite:"):
        target = target.removeprefix("sqlite:").removeprefix("//")
    return SqliteStore(target, bounds, settings.store_max_bytes)
