"""The serving model: a model's answers wait for each other the way an inference server's do.

Off unless a setting or the model's profile turns a piece on (a setting wins). Per model and
host: `max_concurrency` slots, a FIFO queue up to `max_queue` (then 429), prefill per
uncached input token, decode gaps slowed by load, and a prefix cache (llmsim.state
.prefixcache). Slots are per host (llmsim.state.hostslots with `--workers`); HTTP, WebSocket
and background responses all take one. The story: docs/internals.md#stateserving.
"""
from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any, Iterator

from llmsim.errors import APIError
from llmsim.sim import inputs, tokens
from llmsim.state import prefixcache
from llmsim.state.hostslots import HostSlots, SlotFile

FIELDS = ("max_concurrency", "max_queue", "prefill_ms_per_token", "load_slowdown", "prefix_cache")
CAPACITY_MESSAGE = "The server is at capacity: too many requests are waiting for {model}. Please try again later."


@dataclass(frozen=True, slots=True)
class Params:
    """One model's serving parameters (what settings and its profile make of them)."""
    max_concurrency: int | None
    max_queue: int | None
    prefill_ms_per_token: float
    load_slowdown: float
    prefix_cache: bool
    block_tokens: int
    cache_blocks: int

    def factor(self, running: int) -> float:
        """The gap's factor with `running` requests in slots."""
        n = self.max_concurrency
        if self.load_slowdown == 1.0 or not n or n < 2 or running <= 1:
            return 1.0
        return 1.0 + (self.load_slowdown - 1.0) * (min(running, n) - 1) / (n - 1)


def params(settings, profile) -> Params | None:
    """The serving parameters for a model of `profile` under `settings` (None: all off)."""
    given = profile.serving or {}
    values = {}
    for name in FIELDS:
        value = getattr(settings, name)
        values[name] = given.get(name) if value is None else value
    if not any(values.values()):
        return None
    return Params(values["max_concurrency"], values["max_queue"], float(values["prefill_ms_per_token"] or 0.0),
                  float(values["load_slowdown"] or 1.0), bool(values["prefix_cache"]),
                  settings.prefix_block_tokens, settings.prefix_cache_blocks)


def capacity_error(model: str) -> APIError:
    return APIError(CAPACITY_MESSAGE.format(model=model), status=429, type="rate_limit_error",
                    code="rate_limit_exceeded", headers={"retry-after": "1", "retry-after-ms": "1000"})


class Slots:
    """One model's slots in this process: how many run, and who waits, in order."""
    __slots__ = ("running", "queue")

    def __init__(self):
        self.running = 0
        self.queue: collections.deque[asyncio.Future] = collections.deque()

    def enter(self, limit: int | None, queue: int | None, capacity_error):
        """A slot (None) or a place to `wait` for; raises `capacity_error()` when the queue is full."""
        if limit is None or (self.running < limit and not self.queue):
            self.running += 1
            return None
        if queue is not None and len(self.queue) >= queue:
            raise capacity_error()
        turn = asyncio.get_running_loop().create_future()
        self.queue.append(turn)
        return turn

    async def wait(self, turn: asyncio.Future) -> None:
        try:
            await turn              # `release` hands its slot over: `running` stays as it was
        except asyncio.CancelledError:
            self.leave(turn)
            raise

    def leave(self, turn: asyncio.Future) -> None:
        """Give up a place (a slot handed over meanwhile is passed on)."""
        if turn.done() and not turn.cancelled():
            self.release()
        else:
            turn.cancel()
            self.queue.remove(turn)

    def release(self) -> None:
        queue = self.queue
        while queue:
            turn = queue.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.running -= 1

    @property
    def waiting(self) -> int:
        return len(self.queue)

    def load(self) -> int:
        """The requests holding a slot (in this process: all of them)."""
        return self.running


class Admission:
    """A request with a slot or a place in the queue (`Serving.enter`); `ticket` waits for its
    turn and prefills; `abandon` gives the slot or the place back."""
    __slots__ = ("serving", "slots", "place", "holding", "params", "plan", "key", "turns", "encoding",
                 "start", "began")

    def __init__(self, serving, slots, place, params, plan, key, turns, encoding, start):
        self.serving, self.slots, self.place, self.params = serving, slots, place, params
        self.holding = place is None
        self.plan, self.key, self.turns, self.encoding, self.start = plan, key, turns, encoding, start
        self.began = asyncio.get_running_loop().time()

    async def ticket(self) -> "Ticket":
        """Wait for the slot, look the input up in the prefix cache (setting the plan's
        `usage.cached_tokens`), and say when the answer's clock starts: after the wait, and
        after prefilling the uncached input tokens."""
        if self.place is not None:
            place, self.place = self.place, None
            await self.slots.wait(place)        # (gives its place up if cancelled)
            self.holding = True
        p, plan = self.params, self.plan
        usage = plan.usage
        try:
            if p.prefix_cache:
                model = plan.model
                hashes = prefixcache.block_hashes(model, self.key,
                                                  token_ids(self.turns, self.encoding), p.block_tokens,
                                                  usage.input_tokens)
                hits = await self.serving.cache.lookup(model, hashes, p.cache_blocks, p.block_tokens)
                usage.cached_tokens = hits * p.block_tokens
        except BaseException:
            self.abandon()
            raise
        self.holding = False                    # the ticket holds the slot now
        waited = asyncio.get_running_loop().time() - self.began
        delay = waited + p.prefill_ms_per_token * (usage.input_tokens - usage.cached_tokens) / 1000.0
        return Ticket(self.start + delay, delay, p, self.slots, plan.first_token_at)

    def abandon(self) -> None:
        if self.place is not None:
            place, self.place = self.place, None
            self.slots.leave(place)
        if self.holding:
            self.holding = False
            self.slots.release()

    def __del__(self):
        self.abandon()


class Ticket:
    """One admitted request: when its answer's clock starts (`delay` after the request's: the
    wait and the prefill), and its slot until it ends."""
    __slots__ = ("start", "delay", "params", "slots", "first", "held")

    def __init__(self, start: float, delay: float, params: Params, slots, first: float):
        self.start, self.delay, self.params, self.slots, self.first = start, delay, params, slots, first
        self.held = True

    def factor(self) -> float:
        p = self.params
        return 1.0 if p.load_slowdown == 1.0 else p.factor(self.slots.load())

    def release(self) -> None:
        if self.held:
            self.held = False
            self.slots.release()

    def end_at(self, end: float) -> float:
        """When a whole (not streamed) answer planned to end at `end` ends, at today's load."""
        first = self.first
        return end if end <= first else first + (end - first) * self.factor()

    def timed(self, pairs) -> "Timed":
        """(due time, item) pairs with every gap after the first token slowed by the load
        as it begins; the slot is released when they end or are closed."""
        return Timed(iter(pairs), self)

    def __del__(self):
        self.release()          # never started (the answer failed before its stream began)


class Timed:
    """The iterator `Ticket.timed` makes (the pacer closes it when the stream ends)."""
    __slots__ = ("pairs", "ticket", "source", "due")

    def __init__(self, pairs: Iterator, ticket: Ticket):
        self.pairs, self.ticket = pairs, ticket
        self.source = self.due = 0.0        # the last pair's planned and slowed due times

    def __iter__(self):
        return self

    def __next__(self) -> tuple[float, Any]:
        try:
            at, item = next(self.pairs)
        except BaseException:
            self.ticket.release()
            raise
        ticket = self.ticket
        if at <= ticket.first:
            self.source = self.due = at
            return at, item
        self.due += (at - self.source) * ticket.factor()
        self.source = at
        return self.due, item

    def close(self) -> None:
        self.ticket.release()
        close = getattr(self.pairs, "close", None)
        if close is not None:
            close()


class Serving:
    """The serving model of one process: slots per model (shared by the workers of a host
    through a file in `shared_dir`, when given) and the prefix cache."""

    def __init__(self, store, profiles: dict, shared_dir: str | None = None):
        self.store, self.profiles = store, profiles
        self.models: dict = {}      # model: Slots (one process) or HostSlots (--workers N)
        self.file = SlotFile(shared_dir) if shared_dir else None
        self.cache = prefixcache.for_store(store)
        self.settings = None        # the settings `on` was worked out for: the simulator's, which
        self.on = False             # calls `refresh` as they change: is any piece on anywhere?
        self._params: dict = {}

    def refresh(self, settings) -> None:
        """Serve with `settings` from now on (at start-up, and as they change at runtime)."""
        self.settings, self._params = settings, {}
        self.on = any(params(settings, profile) is not None for profile in self.profiles.values())

    def params(self, settings, profile) -> Params | None:
        """`params` of a profile, remembered until `refresh` (read per request)."""
        found = self._params.get(profile.name, False)
        if found is False:
            found = self._params[profile.name] = params(settings, profile)
        return found

    def enter(self, p: Params, plan, key: str | None, turns: list, encoding: str, start: float) -> Admission:
        """Take a slot or a place in the model's queue (429 when the queue is full); `key`: the
        request's `prompt_cache_key` (the prefix cache's partition)."""
        model = plan.model
        slots = self.models.get(model)
        if slots is None:
            slots = self.models[model] = Slots() if self.file is None else HostSlots(self.file, model)
        place = slots.enter(p.max_concurrency, p.max_queue, lambda: capacity_error(model))
        return Admission(self, slots, place, p, plan, key, turns, encoding, start)

    def snapshot(self) -> dict:
        """Per model: running and waiting requests (the host's, with `host`, under --workers),
        prefix-cache tokens queried and hit, the cache's use (a fraction of its capacity)."""
        if self.file is None:
            out = {model: {"running": s.running, "waiting": s.waiting} for model, s in self.models.items()}
        else:                       # the host's, read now (the stats take this process's read)
            out = {model: {"running": running, "waiting": waiting, "host": 1}
                   for model, (running, waiting) in self.file.counts().items()}
        for model, counts in self.cache.counts().items():
            out.setdefault(model, {"running": 0, "waiting": 0}).update(counts)
        return out


def token_ids(turns: list[inputs.Turn], encoding: str) -> list[int]:
    """The input's tokens, in order: each turn's role, then its texts."""
    enc = tokens.encoding(encoding)
    ids: list[int] = []
    for turn in turns:
        ids += prefixcache.encoded(enc, turn.role)
        for text in turn.texts:
            ids += prefixcache.encoded(enc, text)
    return ids
