"""State for the Responses API: stored responses, their events, conversations.

`open_store(settings)` picks the backend from the `store` setting: a `redis://` (or
`rediss://`, `unix://`) URL selects Redis; `lmdb:DIR` an LMDB environment; `memory` (or no
setting at all) the dicts of this one process; `sqlite:PATH`, or a path ending `.db`,
`.sqlite` or `.sqlite3`, an embedded SQLite file. `check_store` refuses every other form, and
a file or directory whose parent does not exist: nothing is made that the user did not name.
`llmsim serve --workers N` passes a path when none is set (a temp LMDB directory), so its
workers share one store. Nothing connects until the first call.
"""
from __future__ import annotations

import difflib
import os
from urllib.parse import urlsplit, urlunsplit

from llmsim.errors import ConfigError
from llmsim.state.store.capabilities import Capabilities
from llmsim.state.store.base import ACTIVE, Bounds, Conversation, Frames, Page, Store, StoredResponse, paginate

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
MEMORY = "memory"
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
FORMS = ("memory, lmdb:DIR, sqlite:PATH (or a path ending .db, .sqlite or .sqlite3), "
         "redis://HOST:PORT/DB (or rediss://, unix://)")

__all__ = ["ACTIVE", "Bounds", "Capabilities", "Conversation", "Frames", "Page", "Store", "StoredResponse", "check_store",
           "open_store", "paginate", "shown_store"]


def check_store(target: str | None) -> None:
    """Raise ConfigError unless `target` is one of the documented forms (FORMS), naming what is
    wrong; a file or directory store's parent directory must exist (it is never made)."""
    if target is None or target == MEMORY or target.startswith(REDIS_SCHEMES):
        return
    if target.startswith("lmdb:"):
        _check_path(target, target.removeprefix("lmdb:").removeprefix("//"), "an LMDB directory")
    elif target.startswith("sqlite:"):
        _check_path(target, target.removeprefix("sqlite:").removeprefix("//"), "a SQLite file")
    elif "://" in target:
        raise _refused(target, f"{target.partition('://')[0]}:// is not a store llmsim speaks")
    elif target.lower().endswith(SQLITE_SUFFIXES):
        _check_path(target, target, "a SQLite file")
    else:
        near = difflib.get_close_matches(target, [MEMORY, "lmdb:", "sqlite:", "redis://"], n=1, cutoff=0.6)
        raise _refused(target, f"not a store (did you mean {near[0]!r}?)" if near else "not a store")


def _check_path(target: str, path: str, what: str) -> None:
    if not path:
        raise _refused(target, f"{what} needs a path after the colon")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise _refused(target, f"the directory {parent} does not exist (llmsim makes only the store itself)")
    if what == "a SQLite file" and os.path.isdir(path):
        raise _refused(target, f"{path} is a directory, not a SQLite file (lmdb:{path} for LMDB)")


def _refused(target: str, why: str) -> ConfigError:
    return ConfigError(f"store {shown_store(target)!r}: {why}; use one of: {FORMS}")


def shown_store(target: str) -> str:
    """`target` as logs and messages show it: a URL's password hidden."""
    if "://" not in target:
        return target
    parts = urlsplit(target)
    if not parts.password:
        return target
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def open_store(settings) -> Store:
    """The store the settings name, its capabilities checked (llmsim.state.store.capabilities)."""
    store = _open(settings)
    store.capabilities.check(type(store).__name__)
    return store


def _open(settings) -> Store:
    bounds = Bounds(settings.store_max_entries, settings.store_ttl_s, settings.store_evict_when_full)
    target = settings.store
    check_store(target)
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
