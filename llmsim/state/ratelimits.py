"""Rate limits as OpenAI counts them: token buckets per (API key, model), refilled continuously.

A request costs 1 request and its input plus its maximum output tokens; it is served only
when every bucket holds its cost, else it takes nothing and gets 429 naming the bucket
that is short. The buckets live where one limit holds for the whole server: this process
(`Local`), the workers' shared file (`SharedFile`) or a store's `buckets` capability
(`Shared`). Header names and wording are templates/ratelimits.yaml's; the values are written
here. The story: docs/internals.md#stateratelimits.
"""
from __future__ import annotations

import fcntl
import math
from math import ceil
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import orjson

from llmsim.errors import APIError
from llmsim.state.store.capabilities import Buckets

WINDOW_S = 60.0                 # both limits are per minute
WINDOW_MS = WINDOW_S * 1000
FILE_NAME = "ratelimits.json"   # SharedFile's, in the stats directory
MAX_CACHED = 4096               # (key, model) pairs, buckets and durations remembered


@dataclass(frozen=True)
class Limit:
    rpm: int | None
    tpm: int | None


def limits_of(settings) -> "Limits | None":
    """The limits the settings set, or None when none is set (nothing is counted)."""
    table = settings.rate_limits or {}
    default = dict(table.get("default") or {})
    if settings.rate_limit_rpm is not None:
        default["rpm"] = settings.rate_limit_rpm
    if settings.rate_limit_tpm is not None:
        default["tpm"] = settings.rate_limit_tpm
    models, keys = table.get("models") or {}, table.get("keys") or {}
    if not any(v is not None for part in (default, *models.values(), *keys.values()) for v in part.values()):
        return None
    return Limits(default, models, keys)


class Limits:
    def __init__(self, default: Mapping, models: Mapping, keys: Mapping):
        self.default, self.models, self.keys = default, models, keys

    def __call__(self, key: str, model: str) -> Limit | None:
        values = {**self.default, **(self.models.get(model) or {}), **(self.keys.get(key) or {})}
        rpm, tpm = values.get("rpm"), values.get("tpm")
        return Limit(rpm, tpm) if rpm is not None or tpm is not None else None


class Pair:
    """One (API key, model): its limits, its buckets' name and its headers that never change."""
    __slots__ = ("limit", "rpm", "tpm", "model", "bucket", "fixed")

    def __init__(self, limit: Limit, key: str, model: str, names: tuple[bytes, ...]):
        self.limit, self.rpm, self.tpm, self.model = limit, limit.rpm, limit.tpm, model
        self.bucket = f"{key}\x00{model}"
        self.fixed = ([(names[0], b"%d" % limit.rpm)] if limit.rpm else []) + \
                     ([(names[1], b"%d" % limit.tpm)] if limit.tpm else [])


def duration(seconds: float) -> str:
    """A duration as OpenAI writes it (Go's style): `20ms`, `1s`, `1.5s`, `6m0s`, `1h2m3s`."""
    ms = _ms(seconds)
    if ms < 1000:
        return f"{ms}ms" if ms else "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest // 1000}.{rest % 1000:03d}".rstrip("0").rstrip(".")
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "") + f"{secs}s"


_DURATIONS: dict[int, bytes] = {}       # by whole milliseconds: most answers need a few


def _ms(seconds: float) -> int:
    """Whole milliseconds, rounded up (a float a hair above a whole number is that number)."""
    return math.ceil(seconds * 1000 - 1e-6) if seconds > 0 else 0


def duration_bytes(seconds: float) -> bytes:
    ms = _ms(seconds)
    found = _DURATIONS.get(ms)
    if found is None:
        found = duration(ms / 1000).encode()
        if len(_DURATIONS) < MAX_CACHED:
            _DURATIONS[ms] = found
    return found


@dataclass
class Taken:
    """A refused request's take, as its 429's message and retry headers tell it."""
    limit: Limit
    cost: int                       # tokens the request was estimated at
    requests: float                 # what the buckets hold
    tokens: float
    refused: str                    # "requests" or "tokens"
    wait_s: float                   # the wait until that bucket holds the request's cost

    @property
    def remaining_requests(self) -> int:
        return max(0, int(self.requests))

    @property
    def remaining_tokens(self) -> int:
        return max(0, int(self.tokens))

    @property
    def too_large(self) -> bool:
        """Tokens more than the whole bucket holds: no wait helps."""
        return self.refused == "tokens" and self.limit.tpm is not None and self.cost > self.limit.tpm

    @property
    def retry_after(self) -> str:
        return str(math.ceil(self.wait_s))

    @property
    def retry_after_ms(self) -> str:
        return str(math.ceil(self.wait_s * 1000))

    @property
    def try_again_in(self) -> str:
        return duration(self.wait_s)


# What a bucket store's `take` answers: the levels after the take (before it, when refused),
# which bucket refused (None: served) and the wait until it would not.
Outcome = tuple[float, float, "str | None", float]


def take(state: list, limit: Limit, cost: int, now: float) -> Outcome:
    """A request costing `cost` tokens asks the buckets `state` ([requests, tokens, when], changed
    in place: refilled to `now`, and the cost taken unless refused)."""
    rpm, tpm = limit.rpm, limit.tpm
    elapsed = now - state[2]
    if elapsed > 0:
        state[2] = now
        if rpm:
            state[0] = min(rpm, state[0] + elapsed * rpm / WINDOW_S)
        if tpm:
            state[1] = min(tpm, state[1] + elapsed * tpm / WINDOW_S)
    requests, tokens = state[0], state[1]
    short_requests = rpm and requests < 1
    short_tokens = tpm and tokens < cost
    if not (short_requests or short_tokens):
        if rpm:
            state[0] = requests = requests - 1
        if tpm:
            state[1] = tokens = tokens - cost
        return requests, tokens, None, 0.0
    wait_requests = (1 - requests) * WINDOW_S / rpm if short_requests else 0.0
    wait_tokens = ((cost - tokens) * WINDOW_S / tpm if cost <= tpm else math.inf) if short_tokens else 0.0
    if wait_tokens > wait_requests:
        return requests, tokens, "tokens", wait_tokens if cost <= tpm else 0.0
    return requests, tokens, "requests", wait_requests


def full(limit: Limit, now: float) -> list:
    return [float(limit.rpm or 0), float(limit.tpm or 0), now]


class Local:
    """The buckets of this one process."""

    def __init__(self):
        self.buckets: dict[str, list] = {}

    def take(self, bucket: str, limit: Limit, cost: int) -> Outcome:
        now = time.monotonic()
        state = self.buckets.get(bucket)
        if state is None:
            if len(self.buckets) >= MAX_CACHED:    # buckets full again are the same as none
                self.buckets = {k: v for k, v in self.buckets.items() if now - v[2] < WINDOW_S}
            state = self.buckets[bucket] = full(limit, now)
        return take(state, limit, cost, now)


class SharedFile:
    """The buckets of every `--workers` process: one JSON file, changed under an exclusive lock."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / FILE_NAME
        self.fd: int | None = None

    def take(self, bucket: str, limit: Limit, cost: int) -> Outcome:
        if self.fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fd = self.fd
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(fd, os.fstat(fd).st_size, 0)
            buckets = orjson.loads(raw) if raw else {}
            now = time.time()
            state = buckets.get(bucket)
            if state is None:
                if len(buckets) >= MAX_CACHED:
                    buckets = {k: v for k, v in buckets.items() if now - v[2] < WINDOW_S}
                state = buckets[bucket] = full(limit, now)
            outcome = take(state, limit, cost, now)
            data = orjson.dumps(buckets)
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return outcome


class Shared:
    """The buckets of every process sharing a store that keeps them (its `buckets`)."""

    def __init__(self, buckets: Buckets):
        self.buckets = buckets

    async def take(self, bucket: str, limit: Limit, cost: int) -> Outcome:
        return await self.buckets.take(bucket, limit.rpm or 0, limit.tpm or 0, cost)


class RateLimited(APIError):
    """An empty bucket (rendered like any APIError; the message is templates/ratelimits.yaml's;
    `retry_delay`: the wait, for an envelope that carries it, as Google's RetryInfo)."""


OPENAI = "openai"               # the provider whose headers are the x-ratelimit-* ones
HEADERS = ("limit_requests", "limit_tokens", "remaining_requests", "remaining_tokens",
           "reset_requests", "reset_tokens")     # what templates/ratelimits.yaml names


class RateLimiter:
    """`limiter.take(key, model, cost)` per request; `limiter.limits` is None when no limit is set."""

    def __init__(self, settings, store, templates):
        self.templates = templates
        self.template = None
        self.dialects: dict[str, Dialect] = {}
        shared = store.capabilities.buckets
        self.waits = shared is not None     # a store that answers later
        if shared is not None:
            self.buckets: Any = Shared(shared)
        elif settings.workers > 1 and settings.stats_dir:
            self.buckets = SharedFile(settings.stats_dir)
        else:
            self.buckets = Local()
        self.configure(settings)

    def configure(self, settings) -> None:
        """The limits of these settings (at start-up, and when PATCH /llmsim/config changes them)."""
        limits = limits_of(settings)
        if limits is not None and self.template is None:
            self.template = self.templates["ratelimits"]    # ConfigError when the templates lack it
            names = self.template.body(shape="ratelimit_header_names")
            self.names = tuple(names[role].encode("latin-1") for role in HEADERS)
            self.dialects = {provider: Dialect(self.template.body(shape=f"{provider}_ratelimit_header_names"))
                             for provider in self.template.body(shape="ratelimit_providers")}
        self.limits = limits
        self.pairs: dict[tuple[str, str], Pair | None] = {}

    def pair(self, key: str, model: str) -> Pair | None:
        found = self.pairs.get((key, model), False)
        if found is False:
            limit = self.limits(key, model)
            found = None if limit is None else Pair(limit, key, model, self.names)
            if len(self.pairs) < MAX_CACHED:
                self.pairs[(key, model)] = found
        return found

    def headers(self, pair: Pair, requests: float, tokens: float) -> list[tuple[bytes, bytes]]:
        """The x-ratelimit-* headers (names: the template's; values: numbers and durations)."""
        names, rpm, tpm = self.names, pair.rpm, pair.tpm
        if rpm and tpm:
            # (the durations' cache read here: `duration_bytes` only for a duration not yet seen)
            reset_requests = _DURATIONS.get(ceil((rpm - requests) * WINDOW_MS / rpm - 1e-6)) or \
                duration_bytes((rpm - requests) * WINDOW_S / rpm)
            reset_tokens = _DURATIONS.get(ceil((tpm - tokens) * WINDOW_MS / tpm - 1e-6)) or \
                duration_bytes((tpm - tokens) * WINDOW_S / tpm)
            return [*pair.fixed, (names[2], b"%d" % requests), (names[3], b"%d" % tokens),
                    (names[4], reset_requests), (names[5], reset_tokens)]
        if rpm:
            return [*pair.fixed, (names[2], b"%d" % requests),
                    (names[4], duration_bytes((rpm - requests) * WINDOW_S / rpm))]
        return [*pair.fixed, (names[3], b"%d" % tokens), (names[5], duration_bytes((tpm - tokens) * WINDOW_S / tpm))]

    def take_now(self, key: str, model: str, cost: int, provider: str = OPENAI) -> list[tuple[bytes, bytes]] | None:
        """The rate-limit headers of a request (in `provider`'s names), once it has taken its
        cost; raises RateLimited (with the same headers) when a bucket is short. None: no limit
        for this pair. For the stores that answer at once (`waits` false); `take` for any."""
        pair = self.pairs.get((key, model), False)
        if pair is False:
            pair = self.pair(key, model)
        if pair is None:
            return None
        requests, tokens, refused, wait = self.buckets.take(pair.bucket, pair.limit, cost)
        if refused is None:
            return self.headers(pair, requests, tokens) if provider == OPENAI else \
                self.dialects[provider].headers(pair.limit, requests, tokens)
        return self.told(pair, cost, (requests, tokens, refused, wait), provider)

    async def take(self, key: str, model: str, cost: int, provider: str = OPENAI) -> list[tuple[bytes, bytes]] | None:
        if not self.waits:
            return self.take_now(key, model, cost, provider)
        pair = self.pair(key, model)
        return None if pair is None else \
            self.told(pair, cost, await self.buckets.take(pair.bucket, pair.limit, cost), provider)

    def told(self, pair: Pair, cost: int, outcome: Outcome, provider: str = OPENAI) -> list[tuple[bytes, bytes]]:
        requests, tokens, refused, wait = outcome
        dialect = self.dialects.get(provider)
        headers = self.headers(pair, requests, tokens) if dialect is None else dialect.headers(pair.limit, requests, tokens)
        if refused is None:
            return headers
        limit = pair.limit
        taken = Taken(limit, cost, requests, tokens, refused, wait)
        prefix = "" if dialect is None else provider + "_"
        error = self.template.body(shape=prefix + "ratelimit_error", taken=taken, model=pair.model)
        more = {} if taken.too_large else self.template.body(shape=prefix + "ratelimit_retry_headers", taken=taken)
        exc = RateLimited(error["message"], status=429, type=error.get("type"), code=error.get("code"),
                          headers={**{name.decode(): value.decode() for name, value in headers},
                                   **{name: str(value) for name, value in more.items()}})
        if not taken.too_large:
            exc.retry_delay = f"{math.ceil(taken.wait_s)}s"     # (Google's RetryInfo)
        raise exc


class Dialect:
    """Another provider's rate-limit headers: for each bucket, names that take `-limit`,
    `-remaining` and `-reset` (an RFC 3339 time: when the bucket is full again)."""

    def __init__(self, names: Mapping[str, Any] | None):
        names = names or {}
        self.requests = tuple(n.encode("latin-1") for n in names.get("requests") or ())
        self.tokens = tuple(n.encode("latin-1") for n in names.get("tokens") or ())

    def headers(self, limit: Limit, requests: float, tokens: float) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        now = time.time()
        for names, capacity, level in ((self.requests, limit.rpm, requests), (self.tokens, limit.tpm, tokens)):
            if not capacity or not names:
                continue
            left = max(0, int(level))
            reset = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                  time.gmtime(now + math.ceil((capacity - level) * WINDOW_S / capacity)))
            for name in names:
                out += ((name + b"-limit", b"%d" % capacity), (name + b"-remaining", b"%d" % left),
                        (name + b"-reset", reset.encode()))
        return out
