"""The prefix cache of the serving model (llmsim.state.serving): which input blocks a model has seen.

An input's tokens are cut into blocks of `block` tokens; block i's hash covers block i-1's
hash and its own tokens (a chain, as vLLM's), and the chain starts from the model's name and
the request's `prompt_cache_key`, so blocks are shared only by requests of one model and one
key. A lookup counts the leading blocks already cached (the hits), then marks every block
of the input as just used; beyond `capacity` blocks per model the least recently used go.
At least one input token is always left to prefill (as an inference server computes the last
one again), so only the blocks before the last token are looked up.

Where the cache lives follows the store: one that has a `prefix_table` (Redis: every process
and host using it; LMDB, what `--workers N` use unless told otherwise: the workers of a host)
keeps it (`SharedPrefixCache`); with the memory or a SQLite store each process has its own
(`MemoryPrefixCache`).
"""
from __future__ import annotations

import collections
import hashlib
import struct
from typing import Sequence

import cachetools

from llmsim.state.store import Store
from llmsim.state.store.capabilities import PrefixTable

HASH_BYTES = 16
# Up to a million tokens in all: a list of ints and its text cost about 40 bytes a token.
_ENCODED = cachetools.LRUCache(maxsize=1_000_000, getsizeof=lambda ids: len(ids) + 1)


def encoded(enc, text: str) -> list[int]:
    """`text`'s tokens (remembered by text, up to a million tokens in all)."""
    found = _ENCODED.get((enc.name, text)) if len(text) > 16 else None
    if found is None:
        found = enc.encode_ordinary(text)
        if len(text) > 16:
            _ENCODED[enc.name, text] = found
    return found


def block_hashes(model: str, key: str | None, ids: Sequence[int], block: int, input_tokens: int) -> list[bytes]:
    """The chained hashes of the whole blocks of `ids` before the input's last token."""
    whole = min(len(ids), input_tokens - 1) // block
    previous = hashlib.blake2b(f"{model}\0{key or ''}".encode(), digest_size=HASH_BYTES).digest()
    out = []
    pack = struct.Struct(f"<{block}I").pack
    for i in range(whole):
        previous = hashlib.blake2b(previous + pack(*ids[i * block:(i + 1) * block]),
                                   digest_size=HASH_BYTES).digest()
        out.append(previous)
    return out


class Counts:
    """What one process asked of the cache, per model: tokens queried and hit (vLLM counts
    tokens), and the cache's use as last seen (a fraction of its capacity)."""

    def __init__(self):
        self.models: dict[str, dict] = {}

    def add(self, model: str, queried: int, hit: int, usage: float) -> None:
        m = self.models.get(model)
        if m is None:
            m = self.models[model] = {"prefix_queries": 0, "prefix_hits": 0, "kv_usage": 0.0}
        m["prefix_queries"] += queried
        m["prefix_hits"] += hit
        m["kv_usage"] = usage


class MemoryPrefixCache:
    """This process's cache: per model, an ordered dict of block hashes, oldest use first."""

    def __init__(self):
        self.models: dict[str, collections.OrderedDict] = {}
        self.stats = Counts()

    async def lookup(self, model: str, hashes: list[bytes], capacity: int, block: int = 1) -> int:
        blocks = self.models.get(model)
        if blocks is None:
            blocks = self.models[model] = collections.OrderedDict()
        hits = 0
        for h in hashes:
            if h not in blocks:
                break
            hits += 1
        for h in reversed(hashes):      # the chain's head used last: its tail is evicted first
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > capacity:
            blocks.popitem(last=False)
        self.stats.add(model, len(hashes) * block, hits * block, len(blocks) / capacity)
        return hits

    def counts(self) -> dict:
        return self.stats.models


class SharedPrefixCache:
    """One cache for every process sharing a store that keeps one (its `prefix_table`)."""

    def __init__(self, table: PrefixTable):
        self.table = table
        self.stats = Counts()

    async def lookup(self, model: str, hashes: list[bytes], capacity: int, block: int = 1) -> int:
        if not hashes:
            self.stats.add(model, 0, 0, self.stats.models.get(model, {}).get("kv_usage", 0.0))
            return 0
        hits, n = await self.table.lookup(model, hashes, capacity)
        self.stats.add(model, len(hashes) * block, hits * block, n / capacity)
        return hits

    def counts(self) -> dict:
        return self.stats.models


def for_store(store: Store):
    """The prefix cache that goes with `store`: its own, when it shares one, else this process's."""
    table = store.capabilities.prefix_table
    return SharedPrefixCache(table) if table is not None else MemoryPrefixCache()
