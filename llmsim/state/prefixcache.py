"""The prefix cache of the serving model (llmsim.state.serving): which input blocks a model has seen.

An input's tokens are cut into blocks of `block` tokens; block i's hash covers block i-1's
hash and its own tokens (a chain, as vLLM's), and the chain starts from the model's name and
the request's `prompt_cache_key`, so blocks are shared only by requests of one model and one
key. A lookup counts the leading blocks already cached (the hits), then marks every block
of the input as just used; beyond `capacity` blocks per model the least recently used go.
At least one input token is always left to prefill (as an inference server computes the last
one again), so only the blocks before the last token are looked up.

Where the cache lives follows the store: with a Redis store one cache serves every process
and host using it (`RedisPrefixCache`); with an LMDB store (what `--workers N` use unless told
otherwise) one cache serves the workers of the host (`LmdbPrefixCache`); with the memory or
a SQLite store each process has its own (`MemoryPrefixCache`).
"""
from __future__ import annotations

import collections
import hashlib
import struct
from typing import Sequence

import cachetools

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


# KEYS: the model's sorted set (score: last use) and its clock; ARGV: capacity, hashes...
REDIS_LOOKUP = """
local key, clock, cap = KEYS[1], KEYS[2], tonumber(ARGV[1])
local hits, missed = 0, false
for i = 2, #ARGV do
  if not missed and redis.call('ZSCORE', key, ARGV[i]) then hits = hits + 1 else missed = true end
end
local now = redis.call('INCRBY', clock, #ARGV)
for i = 2, #ARGV do redis.call('ZADD', key, now - i, ARGV[i]) end
local n = redis.call('ZCARD', key)
if n > cap then
  redis.call('ZREMRANGEBYRANK', key, 0, n - cap - 1)
  n = cap
end
return {hits, n}
"""


class RedisPrefixCache:
    """One cache for every process and host sharing a Redis store."""

    def __init__(self, redis, prefix: str):
        self.prefix = prefix
        self._lookup = redis.register_script(REDIS_LOOKUP)
        self.stats = Counts()

    async def lookup(self, model: str, hashes: list[bytes], capacity: int, block: int = 1) -> int:
        if not hashes:
            self.stats.add(model, 0, 0, self.stats.models.get(model, {}).get("kv_usage", 0.0))
            return 0
        key = f"{self.prefix}prefix:{model}"
        hits, n = await self._lookup(keys=[key, key + ":clock"], args=[capacity, *hashes])
        self.stats.add(model, len(hashes) * block, int(hits) * block, int(n) / capacity)
        return int(hits)

    def counts(self) -> dict:
        return self.stats.models


class LmdbPrefixCache:
    """One cache for the processes of a host sharing an LMDB store (its own table there). Per
    model: `b` block hash -> last use, `o` last use -> block hash (oldest first, for eviction),
    `c` the clock, `n` the block count; a lookup is one write transaction, batched with the
    store's other writes of the loop step."""

    def __init__(self, store):
        self.store = store
        self.db = store._open().open_db(b"prefix")
        self.stats = Counts()

    async def lookup(self, model: str, hashes: list[bytes], capacity: int, block: int = 1) -> int:
        hits, n = await self.store._write(lambda txn: self._lookup(txn, model.encode(), hashes, capacity))
        self.stats.add(model, len(hashes) * block, hits * block, n / capacity)
        return hits

    def _lookup(self, txn, model: bytes, hashes: list[bytes], capacity: int) -> tuple[int, int]:
        db, head = self.db, model + b"\0"
        clock = int.from_bytes(txn.get(b"c" + head, b"", db=db), "big")
        n = int.from_bytes(txn.get(b"n" + head, b"", db=db), "big")
        used = [txn.get(b"b" + head + h, db=db) for h in hashes]
        hits = next((i for i, stamp in enumerate(used) if stamp is None), len(used))
        for h, stamp in zip(reversed(hashes), reversed(used)):     # the chain's head used last
            clock += 1
            now = clock.to_bytes(8, "big")
            if stamp is None:
                n += 1
            else:
                txn.delete(b"o" + head + stamp, db=db)
            txn.put(b"b" + head + h, now, db=db)
            txn.put(b"o" + head + now, h, db=db)
        if n > capacity:
            cursor, oldest = txn.cursor(db=db), b"o" + head
            cursor.set_range(oldest)
            while n > capacity and cursor.key().startswith(oldest):
                txn.delete(b"b" + head + cursor.value(), db=db)
                cursor.delete()
                n -= 1
        txn.put(b"c" + head, clock.to_bytes(8, "big"), db=db)
        txn.put(b"n" + head, n.to_bytes(8, "big"), db=db)
        return hits, n

    def counts(self) -> dict:
        return self.stats.models


def for_store(store):
    """The prefix cache that goes with `store`: its own, when it shares one, else this process's."""
    make = getattr(store, "prefix_cache", None)
    return make() if make is not None else MemoryPrefixCache()
