"""`llmsim serve --replay DIR`: answer requests that match a recorded exchange from its fixture.

A match sends the recorded status, body or events, with fresh ids (each recorded id is
replaced by a new one of the same prefix and length, the same everywhere in the answer) and
timestamps moved to now, at the recorded times (divided by `--replay-speed`; 0: at once).
Several fixtures with one key (the same request recorded again) are played in recording
order, the last one repeating. A miss returns None (the caller simulates an answer), or with
`--replay-strict` raises a 404 in the provider's error envelope.
"""
from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import cachetools
from starlette.responses import Response

from llmsim.clock import Clock
from llmsim.errors import NotFoundError
from llmsim.pacing import transport
from llmsim.pacing.draining import Drain
from llmsim.replay import fixtures

PARENTS = 10000                 # short response ids remembered (longer ones carry their key)
FRESH_FIELDS = frozenset({"id", "call_id", "item_id"})
TIMESTAMPS = frozenset({"created", "created_at", "completed_at"})
_PREFIXED = re.compile(r"^([A-Za-z]+[_-])(.+)$")
_HEX = frozenset("0123456789abcdef")
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


class Player:
    def __init__(self, directory: str | Path, clock: Clock, drain: Drain, speed: float = 1.0,
                 strict: bool = False, seed: int | None = None):
        self.clock, self.speed, self.strict = clock, speed, strict
        self.drain = drain          # the app's shutdown and pacers (llmsim.pacing.draining)
        self.fixtures: dict[str, list[dict]] = defaultdict(list)
        for fixture in fixtures.load(Path(directory)):
            self.fixtures[fixture["key"]].append(fixture)
        self.played: dict[str, int] = defaultdict(int)
        self.parents = cachetools.LRUCache(PARENTS)  # a short response id handed out -> its fixture's key
        self.rng = random.Random(seed)            # the fresh ids (--seed fixes them)

    async def answer(self, endpoint: str, body: dict, start: float) -> Response | None:
        """The recorded answer to `body`, paced from `start`; None when nothing matches (not strict)."""
        previous = body.get("previous_response_id") if endpoint == "responses" else None
        parent = (self.parents.get(previous) or _embedded(previous, self.fixtures) or previous) if previous else None
        key = fixtures.key(endpoint, body, parent)
        found = self.fixtures.get(key)
        if not found:
            if self.strict:
                raise NotFoundError(
                    f"No recorded exchange matches this request ({endpoint}, model {body.get('model')!r}, "
                    f"match key {key}), and llmsim serves with --replay-strict. Record it with "
                    f"`llmsim record`, or serve without --replay-strict to simulate it.", code="replay_not_found")
            return None
        n = self.played[key]
        self.played[key] = n + 1
        fixture = found[min(n, len(found) - 1)]
        fresh = self._fresh(fixture, body)
        if (recorded := fixtures.response_id(fixture)) is not None:
            fresh.ids[recorded] = handed = fresh.new_id(recorded, key)
            if _embedded(handed, self.fixtures) != key:        # too short to carry the key
                self.parents[handed] = key
        response = fixture["response"]
        status, headers = response.get("status", 200), response.get("headers") or {}
        if "events" in response:
            frames = [(self._at(event.get("t", 0)), _frame(event, fresh)) for event in response["events"]]
            return transport.SSEResponse(transport.Paced(frames, start, self.clock, drain=self.drain))
        await self.clock.sleep_until(start + self._at(response.get("t", 0)))
        if "body" in response:
            content = json.dumps(fresh(response["body"]), ensure_ascii=False, separators=(",", ":")).encode()
        else:
            content = str(response.get("text", "")).encode()
        kept = {k: v for k, v in headers.items() if k != "content-type"}
        return Response(content, status, kept, media_type=headers.get("content-type", transport.JSON))

    def _at(self, t: float) -> float:
        return t / self.speed if self.speed else 0.0

    def _fresh(self, fixture: dict, body: dict) -> "Fresh":
        offset = int(self.clock.wall()) - int(fixture.get("recorded_at") or self.clock.wall())
        fresh = Fresh(self.rng, offset)
        recorded_previous = (fixture.get("request") or {}).get("body", {}).get("previous_response_id")
        if recorded_previous and body.get("previous_response_id"):     # echo the request's own
            fresh.ids[recorded_previous] = body["previous_response_id"]
        return fresh


class Fresh:
    """Rewrites a recorded value: new ids (one per recorded id) and timestamps moved by `offset`."""

    def __init__(self, rng: random.Random, offset: int):
        self.rng, self.offset = rng, offset
        self.ids: dict[str, str] = {}

    def new_id(self, old: str, key: str = "") -> str:
        """A new id of `old`'s prefix, length and alphabet. A response id begins with its
        fixture's `key` where it is long enough, so a later `previous_response_id` naming it
        finds its exchange in any process (`_embedded`)."""
        match = _PREFIXED.match(old)
        prefix, rest = (match.group(1), match.group(2)) if match else ("", old)
        alphabet = "0123456789abcdef" if set(rest) <= _HEX else _ALNUM
        head = key if len(rest) >= len(key) + 8 else ""
        return prefix + head + "".join(self.rng.choice(alphabet) for _ in rest[len(head):])

    def __call__(self, value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k in FRESH_FIELDS and isinstance(v, str) and v:
                    v = self.ids.get(v) or self.ids.setdefault(v, self.new_id(v))
                elif k == "previous_response_id" and isinstance(v, str):
                    v = self.ids.get(v, v)
                elif k in TIMESTAMPS and isinstance(v, int) and not isinstance(v, bool):
                    v += self.offset
                else:
                    v = self(v)
                out[k] = v
            return out
        if isinstance(value, list):
            return [self(v) for v in value]
        return value


def _embedded(response_id: str, known: dict) -> str | None:
    """The fixture key a replayed response id begins with (Fresh.new_id), if it is one."""
    match = _PREFIXED.match(response_id)
    head = match.group(2)[:fixtures.KEY_LENGTH] if match else ""
    return head if head in known else None


def _frame(event: dict, fresh: Fresh) -> bytes:
    data = event.get("data")
    raw = data if isinstance(data, str) else json.dumps(fresh(data), ensure_ascii=False, separators=(",", ":"))
    name = event.get("event")
    return (f"event: {name}\n" if name else "").encode() + b"data: " + raw.encode() + b"\n\n"
