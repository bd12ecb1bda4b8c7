"""The shared store: Redis (`--store redis://host:port/db`), for several llmsim processes or
machines behind one load balancer.

Keys live under `llmsim:`; writes that must be atomic are Lua scripts; expiry is Redis's own
(an expired entry reads as missing). The writes of stored responses made while another is on
its way go together in one pipeline, each returning once Redis ran it. Capabilities: leases,
attempts, shared_faults, buckets, settings_channel, prefix_table (each a class here).
Key layout: docs/internals.md#statestoreredis.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Sequence

import orjson
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.asyncio.retry import Retry     # (the sync one warns, handed to the async client)

from llmsim.errors import ConfigError
from llmsim.render.jsonbytes import dumps
from llmsim.state.store.base import Bounds, Conversation, StoredResponse, outages_answered
from llmsim.state.store.capabilities import Capabilities

log = logging.getLogger("llmsim")
PREFIX = "llmsim:"
FOREVER = 0   # a TTL of 0 ms means "never expire" in these scripts

# KEYS: none (keys are built from ARGV: not cluster-safe, fine for one Redis).
# Evict: ids of kind `kind` with creation number <= n - max, and their sub-keys.
_EVICT = """
local function evict(kind, n, max_entries, subkeys)
  local order = 'llmsim:' .. kind .. ':order'
  local old = redis.call('ZRANGEBYSCORE', order, '-inf', n - max_entries)
  for _, id in ipairs(old) do
    redis.call('DEL', 'llmsim:' .. kind .. ':' .. id)
    for _, sub in ipairs(subkeys) do redis.call('DEL', 'llmsim:' .. kind .. ':' .. id .. ':' .. sub) end
  end
  redis.call('ZREMRANGEBYSCORE', order, '-inf', n - max_entries)
end
local function expire(key, ttl)
  if tonumber(ttl) > 0 then redis.call('PEXPIRE', key, ttl) end
end
local function push(key, first)  -- RPUSH ARGV[first..] in chunks (unpack has a stack limit)
  for i = first, #ARGV, 1000 do
    redis.call('RPUSH', key, unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
"""

# ARGV: id, status, response, meta, ttl_ms, max_entries, frames...
PUT_RESPONSE = _EVICT + """
local id, ttl = ARGV[1], ARGV[5]
local key = 'llmsim:resp:' .. id
redis.call('DEL', key, key .. ':ev')
redis.call('HSET', key, 'status', ARGV[2], 'response', ARGV[3], 'meta', ARGV[4])
expire(key, ttl)
if ARGV[2] == 'queued' or ARGV[2] == 'in_progress' then redis.call('SADD', 'llmsim:resp:active', id) end
if #ARGV > 6 then
  push(key .. ':ev', 7)
  expire(key .. ':ev', ttl)
end
local n = redis.call('INCR', 'llmsim:resp:seq')
redis.call('ZADD', 'llmsim:resp:order', n, id)
evict('resp', n, tonumber(ARGV[6]), {'ev'})
return n
"""

# ARGV: id, expect_events (-1: any), ttl_ms, status ('' keeps it), response ('' keeps it), frames...
APPEND_EVENTS = _EVICT + """
local key = 'llmsim:resp:' .. ARGV[1]
local status = redis.call('HGET', key, 'status')
if status ~= 'queued' and status ~= 'in_progress' then return 0 end
local count = redis.call('LLEN', key .. ':ev')
if tonumber(ARGV[2]) >= 0 and count ~= tonumber(ARGV[2]) then return 0 end
if #ARGV > 5 then push(key .. ':ev', 6) end
if ARGV[4] ~= '' then
  redis.call('HSET', key, 'status', ARGV[4], 'response', ARGV[5])
  if ARGV[4] ~= 'queued' and ARGV[4] ~= 'in_progress' then redis.call('SREM', 'llmsim:resp:active', ARGV[1]) end
end
expire(key, ARGV[3])
expire(key .. ':ev', ARGV[3])
return 1
"""

# ARGV: id, record, ttl_ms, max_entries
PUT_CONVERSATION = _EVICT + """
local key = 'llmsim:conv:' .. ARGV[1]
local existed = redis.call('EXISTS', key)
redis.call('SET', key, ARGV[2])
expire(key, ARGV[3])
if existed == 1 then
  expire(key .. ':items', ARGV[3])
  expire(key .. ':order', ARGV[3])
  return 0
end
local n = redis.call('INCR', 'llmsim:conv:seq')
redis.call('ZADD', 'llmsim:conv:order', n, ARGV[1])
evict('conv', n, tonumber(ARGV[4]), {'items', 'order'})
return n
"""

# ARGV: id, ttl_ms, then pairs item_id, item
ADD_ITEMS = _EVICT + """
local key = 'llmsim:conv:' .. ARGV[1]
if redis.call('EXISTS', key) == 0 then return 0 end
for i = 3, #ARGV, 2 do
  redis.call('RPUSH', key .. ':order', ARGV[i])
  redis.call('HSET', key .. ':items', ARGV[i], ARGV[i + 1])
end
expire(key, ARGV[2])
expire(key .. ':items', ARGV[2])
expire(key .. ':order', ARGV[2])
return 1
"""

# ARGV: id, item_id
DELETE_ITEM = """
local key = 'llmsim:conv:' .. ARGV[1]
if redis.call('EXISTS', key) == 0 then return 0 end
redis.call('LREM', key .. ':order', 0, ARGV[2])
return redis.call('HDEL', key .. ':items', ARGV[2])
"""

# ARGV: id
CONVERSATION_ITEMS = """
local key = 'llmsim:conv:' .. ARGV[1]
if redis.call('EXISTS', key) == 0 then return false end
local ids = redis.call('LRANGE', key .. ':order', 0, -1)
local items = {}
for i = 1, #ids, 1000 do
  local part = redis.call('HMGET', key .. ':items', unpack(ids, i, math.min(i + 999, #ids)))
  for _, item in ipairs(part) do items[#items + 1] = item end
end
return items
"""

# The ids in resp:active still queued or in progress; the others (ended, deleted, expired) leave it.
ACTIVE_RESPONSES = """
local found = {}
for _, id in ipairs(redis.call('SMEMBERS', 'llmsim:resp:active')) do
  local status = redis.call('HGET', 'llmsim:resp:' .. id, 'status')
  if status == 'queued' or status == 'in_progress' then found[#found + 1] = id
  else redis.call('SREM', 'llmsim:resp:active', id) end
end
return found
"""

# ARGV: id, after
EVENTS = """
local key = 'llmsim:resp:' .. ARGV[1]
local status = redis.call('HGET', key, 'status')
if not status then return false end
return {status, redis.call('LRANGE', key .. ':ev', tonumber(ARGV[2]) + 1, -1)}
"""


# The shared fault schedule (llmsim.faults): `faults:schedule` a JSON list of entries
# {kind, count, every, params, seen, fired} (0: no count / every), `faults:rates` the rates' JSON,
# `faults:config` the digest of the configuration last written by a starting process.
# PICK: one request seen by every entry; the first entry to fire fires (and goes once its count is
# reached). Returns {fired entry or nil, rates or nil}.
PICK_FAULT = """
local key = 'llmsim:faults:schedule'
local rates = redis.call('GET', 'llmsim:faults:rates')
local raw = redis.call('GET', key)
if not raw then return {false, rates} end
local schedule = cjson.decode(raw)
local fired = false
for i, entry in ipairs(schedule) do
  entry.seen = entry.seen + 1
  if not fired and (entry.every == 0 or entry.seen % entry.every == 0) then fired = i end
end
local result = false
if fired then
  local entry = schedule[fired]
  entry.fired = entry.fired + 1
  result = cjson.encode(entry)
  if entry.count > 0 and entry.fired >= entry.count then table.remove(schedule, fired) end
end
if #schedule == 0 then redis.call('DEL', key) else redis.call('SET', key, cjson.encode(schedule)) end
return {result, rates}
"""

# ARGV: replace (1: replace the schedule, 0: append), entries (a JSON list), rates ('' keeps them)
UPDATE_FAULTS = """
local key = 'llmsim:faults:schedule'
local schedule = {}
if ARGV[1] ~= '1' then
  local raw = redis.call('GET', key)
  if raw then schedule = cjson.decode(raw) end
end
for _, entry in ipairs(cjson.decode(ARGV[2])) do schedule[#schedule + 1] = entry end
if #schedule == 0 then redis.call('DEL', key) else redis.call('SET', key, cjson.encode(schedule)) end
if ARGV[3] ~= '' then redis.call('SET', 'llmsim:faults:rates', ARGV[3]) end
return 1
"""

# ARGV: digest, entries (a JSON list), rates. Written unless this configuration already was.
SEED_FAULTS = """
if redis.call('GET', 'llmsim:faults:config') == ARGV[1] then return 0 end
redis.call('SET', 'llmsim:faults:config', ARGV[1])
if ARGV[2] == '[]' then redis.call('DEL', 'llmsim:faults:schedule')
else redis.call('SET', 'llmsim:faults:schedule', ARGV[2]) end
redis.call('SET', 'llmsim:faults:rates', ARGV[3])
return 1
"""


ATTEMPTS_TTL_S = 3600


# Redis out of reach (stopped, restarting, hung) must be a quick 503, not a hang: each command
# waits at most TIMEOUT_S to connect and TIMEOUT_S for its answer, and is tried once more on a
# fresh connection (a restarted Redis drops the pooled ones).
TIMEOUT_S = 0.75
OUTAGES = (RedisConnectionError, RedisTimeoutError, OSError)


def outage(exc: Exception) -> str | None:
    if isinstance(exc, OUTAGES):
        return f"The state store (Redis) is unavailable ({exc.__class__.__name__}). Please try again later."
    return None


@outages_answered(outage)
class RedisFaults:
    """The fault schedule and rates every process sharing this Redis uses (llmsim.faults)."""

    def __init__(self, redis):
        self.redis = redis
        self._pick = redis.register_script(PICK_FAULT)
        self._update = redis.register_script(UPDATE_FAULTS)
        self._seed = redis.register_script(SEED_FAULTS)

    async def pick(self) -> tuple[dict | None, bytes | None]:
        """This request's fired entry (or None) and the rates' JSON (or None), atomically."""
        fired, rates = await self._pick()
        return (None if fired is None else orjson.loads(fired)), rates

    async def update(self, entries: list[dict], replace: bool, rates: dict | None) -> None:
        await self._update(args=[1 if replace else 0, dumps(entries), b"" if rates is None else dumps(rates)])

    async def seed(self, digest: str, entries: list[dict], rates: dict) -> None:
        await self._seed(args=[digest, dumps(entries), dumps(rates)])

    async def clear(self) -> None:
        await self.redis.delete(f"{PREFIX}faults:schedule", f"{PREFIX}faults:rates")

    async def state(self) -> tuple[list[dict], dict]:
        schedule, rates = await self.redis.mget(f"{PREFIX}faults:schedule", f"{PREFIX}faults:rates")
        return (orjson.loads(schedule) if schedule else []), (orjson.loads(rates) if rates else {})


# KEYS: none. ARGV: bucket key, rpm (0: none), tpm (0: none), cost. llmsim.state.ratelimits'
# `take` on Redis's clock; the key expires once the buckets would be full again.
# Returns {requests, tokens, refused ('' | requests | tokens), wait_s} (numbers as strings).
TAKE = """
local key, rpm, tpm, cost = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', key, 'r', 't', 'at')
local requests, tokens = rpm, tpm
if state[3] then
  local elapsed = math.max(0, now - tonumber(state[3]))
  requests = math.min(rpm, tonumber(state[1]) + elapsed * rpm / 60)
  tokens = math.min(tpm, tonumber(state[2]) + elapsed * tpm / 60)
end
local refused, wait = '', 0
if rpm > 0 and requests < 1 then refused, wait = 'requests', (1 - requests) * 60 / rpm end
if tpm > 0 and tokens < cost then
  local w = 0
  if cost <= tpm then w = (cost - tokens) * 60 / tpm else w = 1e18 end
  if refused == '' or w > wait then refused, wait = 'tokens', w end
end
if refused == '' then
  if rpm > 0 then requests = requests - 1 end
  if tpm > 0 then tokens = tokens - cost end
end
if wait >= 1e18 then wait = 0 end
redis.call('HSET', key, 'r', tostring(requests), 't', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', key, 61000)
return {tostring(requests), tostring(tokens), refused, tostring(wait)}
"""


@outages_answered(outage)
class RedisBuckets:
    """The rate-limit buckets of every process sharing this Redis (llmsim.state.ratelimits)."""

    def __init__(self, redis):
        self._take = redis.register_script(TAKE)

    async def take(self, bucket: str, rpm: int, tpm: int, cost: int) -> tuple[float, float, str | None, float]:
        requests, tokens, refused, wait = await self._take(args=[f"{PREFIX}ratelimit:{bucket}", rpm, tpm, cost])
        return float(requests), float(tokens), refused.decode() or None, float(wait)


@outages_answered(outage)
class RedisSettings:
    """The runtime setting changes of every host (llmsim.state.liveconfig): a hash of setting
    name -> JSON value, and a version number bumped by each change."""
    KEY, VERSION = f"{PREFIX}config", f"{PREFIX}config:version"

    def __init__(self, redis):
        self.redis = redis
        self._version: bytes | None = None

    async def publish(self, changes, replace: bool) -> dict:
        async with self.redis.pipeline(transaction=True) as pipe:
            if replace:
                pipe.delete(self.KEY)
            if changes:
                pipe.hset(self.KEY, mapping={k: orjson.dumps(v) for k, v in changes.items()})
            pipe.incr(self.VERSION)
            await pipe.execute()
        return await self._read(always=True)

    async def poll_changes(self) -> dict | None:
        return await self._read(always=False)

    async def _read(self, always: bool) -> dict | None:
        version = await self.redis.get(self.VERSION)
        if version == self._version and not always:
            return None
        raw = await self.redis.hgetall(self.KEY)
        self._version = version
        return {key.decode(): orjson.loads(value) for key, value in raw.items()}


# KEYS: the model's sorted set (score: last use) and its clock; ARGV: capacity, hashes...
PREFIX_LOOKUP = """
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


@outages_answered(outage)
class RedisPrefixTable:
    """The serving model's prefix cache for every process and host sharing this Redis."""

    def __init__(self, redis):
        self._lookup = redis.register_script(PREFIX_LOOKUP)

    async def lookup(self, model: str, hashes: list[bytes], capacity: int) -> tuple[int, int]:
        key = f"{PREFIX}prefix:{model}"
        hits, n = await self._lookup(keys=[key, key + ":clock"], args=[capacity, *hashes])
        return int(hits), int(n)


# ARGV: id, record, ttl_ms, max_entries
PUT_CHAT = _EVICT + """
local key = 'llmsim:chat:' .. ARGV[1]
local existed = redis.call('EXISTS', key)
redis.call('SET', key, ARGV[2])
expire(key, ARGV[3])
if existed == 1 then return 0 end
local n = redis.call('INCR', 'llmsim:chat:seq')
redis.call('ZADD', 'llmsim:chat:order', n, ARGV[1])
evict('chat', n, tonumber(ARGV[4]), {})
return n
"""


@outages_answered(outage)
class RedisStore:
    needs_task = True   # redis-py's connect and read timeouts are asyncio.timeout (3.11+)

    def __init__(self, url: str, bounds: Bounds):
        try:
            import redis.asyncio as aioredis
        except ImportError:  # pragma: no cover - redis is a declared dependency
            raise ConfigError("store: the 'redis' package is needed for a redis:// store") from None
        try:
            self.redis = aioredis.from_url(url, socket_connect_timeout=TIMEOUT_S, socket_timeout=TIMEOUT_S,
                                           retry=Retry(NoBackoff(), 1), retry_on_timeout=True)
        except ValueError as exc:
            raise ConfigError(f"store: bad Redis URL {url!r}: {exc}") from None
        self.bounds = bounds
        self.ttl_ms = FOREVER if bounds.ttl_s is None else max(1, int(bounds.ttl_s * 1000))
        register = self.redis.register_script
        self._put_response = register(PUT_RESPONSE)
        self._append = register(APPEND_EVENTS)
        self._put_conversation = register(PUT_CONVERSATION)
        self._put_chat = register(PUT_CHAT)
        self._add_items = register(ADD_ITEMS)
        self._delete_item = register(DELETE_ITEM)
        self._items = register(CONVERSATION_ITEMS)
        self._events = register(EVENTS)
        self._active = register(ACTIVE_RESPONSES)
        self.capabilities = Capabilities(
            leases=self, attempts=self, shared_faults=RedisFaults(self.redis), buckets=RedisBuckets(self.redis),
            settings_channel=RedisSettings(self.redis), prefix_table=RedisPrefixTable(self.redis))
        self._queued: list[tuple] = []                 # (script, args, future) not sent yet
        self._sender: asyncio.Task | None = None       # sends the queue, batch by batch
        self._direct: asyncio.Future | None = None     # done when the write on its way alone is

    # ---- batched writes --------------------------------------------------------------
    async def _batched(self, script, args: list):
        """Run `script`: at once when no write is on its way, else in the next pipeline."""
        if self._direct is not None or self._sender is not None:
            future = asyncio.get_running_loop().create_future()
            self._queued.append((script, args, future))
            return await future
        self._direct = asyncio.get_running_loop().create_future()
        try:
            return await script(args=args)
        finally:
            self._direct.set_result(None)
            self._direct = None
            if self._queued and self._sender is None:
                self._sender = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                try:
                    async with self.redis.pipeline(transaction=False) as pipe:
                        for script, args, _ in batch:
                            await script(args=args, client=pipe)     # buffered, not sent
                        results = await pipe.execute(raise_on_error=False)
                except Exception as exc:
                    results = [exc] * len(batch)
                if len(results) != len(batch):          # pragma: no cover - never, but never hang
                    results = [RuntimeError("store: Redis pipeline lost a reply")] * len(batch)
                for (_, _, future), result in zip(batch, results):
                    if future.done():
                        continue
                    if isinstance(result, Exception):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self._sender = None

    async def flush(self) -> None:
        while (pending := self._direct or self._sender) is not None:
            await asyncio.shield(pending)

    # ---- responses -------------------------------------------------------------------
    async def put_response(self, record: StoredResponse, frames: Sequence[bytes] = ()) -> None:
        await self._batched(self._put_response, [record.id, record.status, record.response_json(),
                                                 record.meta_json(), self.ttl_ms, self.bounds.max_entries,
                                                 *frames])

    async def get_response(self, response_id: str) -> StoredResponse | None:
        key = f"{PREFIX}resp:{response_id}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hmget(key, "response", "meta")
            pipe.llen(key + ":ev")
            (response, meta), events = await pipe.execute()
        if response is None:
            return None
        return StoredResponse.from_json(response_id, response, meta, events)

    async def delete_response(self, response_id: str) -> bool:
        key = f"{PREFIX}resp:{response_id}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key, key + ":ev")
            pipe.zrem(f"{PREFIX}resp:order", response_id)
            deleted, _ = await pipe.execute()
        return deleted > 0

    async def append_events(self, response_id: str, frames: Sequence[bytes],
                            snapshot: dict | None = None, *, expect_events: int | None = None) -> bool:
        status, response = (snapshot.get("status", ""), dumps(snapshot)) if snapshot else ("", "")
        done = await self._append(args=[response_id, -1 if expect_events is None else expect_events,
                                        self.ttl_ms, status, response, *frames])
        return bool(done)

    async def active_responses(self) -> list[str]:
        """The ids of the responses still queued or in progress."""
        return [raw.decode() for raw in await self._active()]

    async def renew_lease(self, owner: str, lease_s: float) -> None:
        """The process `owner` runs its background responses for `lease_s` seconds more."""
        await self.redis.set(f"{PREFIX}lease:{owner}", b"1", px=max(1, int(lease_s * 1000)))

    async def live_owners(self, owners: Sequence[str]) -> set[str]:
        """Those of `owners` whose lease has not run out (Redis expires the key)."""
        if not owners:
            return set()
        found = await self.redis.mget([f"{PREFIX}lease:{owner}" for owner in owners])
        return {owner for owner, value in zip(owners, found) if value is not None}

    async def events(self, response_id: str, after: int) -> tuple[list[bytes], str | None]:
        found = await self._events(args=[response_id, after])
        if not found:
            return [], None
        status, frames = found
        return list(frames), status.decode()

    # ---- conversations ---------------------------------------------------------------
    async def put_conversation(self, conversation: Conversation) -> None:
        await self._batched(self._put_conversation, [conversation.id, conversation.to_json(), self.ttl_ms,
                                                     self.bounds.max_entries])

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        raw = await self.redis.get(f"{PREFIX}conv:{conversation_id}")
        return None if raw is None else Conversation.from_json(conversation_id, raw)

    async def delete_conversation(self, conversation_id: str) -> bool:
        key = f"{PREFIX}conv:{conversation_id}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.delete(key + ":items", key + ":order")
            pipe.zrem(f"{PREFIX}conv:order", conversation_id)
            deleted, _, _ = await pipe.execute()
        return deleted > 0

    async def add_items(self, conversation_id: str, items: Sequence[dict], *, wait: bool = True) -> bool:
        pairs = [value for item in items for value in (item.get("id"), dumps(item))]
        return bool(await self._batched(self._add_items, [conversation_id, self.ttl_ms, *pairs]))

    async def conversation_items(self, conversation_id: str) -> list[dict] | None:
        raw = await self._items(args=[conversation_id])
        if raw is None:
            return None
        return [orjson.loads(item) for item in raw if item is not None]

    async def get_item(self, conversation_id: str, item_id: str) -> dict | None:
        key = f"{PREFIX}conv:{conversation_id}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.exists(key)
            pipe.hget(key + ":items", item_id)
            exists, raw = await pipe.execute()
        return orjson.loads(raw) if exists and raw is not None else None

    async def delete_item(self, conversation_id: str, item_id: str) -> bool:
        return bool(await self._delete_item(args=[conversation_id, item_id]))

    # ---- stored chat completions -----------------------------------------------------
    async def put_chat(self, chat_id: str, record: bytes) -> None:
        await self._batched(self._put_chat, [chat_id, record, self.ttl_ms, self.bounds.max_entries])

    async def get_chat(self, chat_id: str) -> bytes | None:
        return await self.redis.get(f"{PREFIX}chat:{chat_id}")

    async def delete_chat(self, chat_id: str) -> bool:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(f"{PREFIX}chat:{chat_id}")
            pipe.zrem(f"{PREFIX}chat:order", chat_id)
            deleted, _ = await pipe.execute()
        return deleted > 0

    async def chats(self) -> list[bytes]:
        ids = await self.redis.zrange(f"{PREFIX}chat:order", 0, -1)
        if not ids:
            return []
        records = await self.redis.mget([f"{PREFIX}chat:{i.decode()}" for i in ids])
        return [record for record in records if record is not None]     # (expired: gone)

    # ---- pending webhook deliveries -----------------------------------------------------
    async def attempt(self, key: str) -> int:
        """How many requests (this one included) reached a scenario's error turn with this
        history (llmsim.faults.scripted); forgotten an hour after the last."""
        name = f"{PREFIX}attempts:{key}"
        async with self.redis.pipeline(transaction=True) as pipe:
            count, _ = await pipe.incr(name).expire(name, ATTEMPTS_TTL_S).execute()
        return int(count)

    async def outbox_put(self, key: str, entry: bytes) -> None:
        await self.redis.hset(f"{PREFIX}outbox", key, entry)

    async def outbox_delete(self, key: str) -> None:
        await self.redis.hdel(f"{PREFIX}outbox", key)

    async def outbox(self) -> list[bytes]:
        return list((await self.redis.hgetall(f"{PREFIX}outbox")).values())

    async def close(self) -> None:
        await self.flush()
        await self.redis.aclose()
