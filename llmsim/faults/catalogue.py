"""Fault injection: the catalogue (`data/faults.yaml`), three triggers, and what a fault does.

Per request the first trigger that names a fault wins: the `x-llmsim-fault` header, the
schedule (`fault_schedule`, `POST /llmsim/faults`), the rates (`errors`, one seeded draw per
request whatever happens). A handler calls `simulator.faults.begin(api, body, headers)`: immediate
errors raise there; the returned Injection shapes the plan and the stream. With a store's
`shared_faults` capability the schedule and rates live in the store, one for every process
(counted atomically). The story: docs/internals.md#faultscatalogue.
"""
from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import orjson

from llmsim.errors import APIError, ConfigError, ConnectionDrop, InvalidRequestError, ServiceUnavailableError
from llmsim.faults.injection import CONTENT, NO_FAULT, Injection
from llmsim.faults.kinds import Fault, Kind
from llmsim.observe.stats import fault_injected
from llmsim.pacing.draining import Drain
from llmsim.render.jsonbytes import dumps
from llmsim.render.templates import Template

HEADER = "x-llmsim-fault"
# header / schedule parameters and their parsers, and the largest value each accepts
PARAMS: dict[str, Callable[[Any], Any]] = {"after_tokens": int, "retry_after": float,
                                           "timeout_after_ms": float}
LIMITS = {"after_tokens": 1_000_000_000, "retry_after": 86_400, "timeout_after_ms": 3_600_000}


class InjectedFault(APIError):
    """An error the simulator sends on purpose (rendered like any APIError)."""
    injected = True                   # counted apart from real errors in /llmsim/stats


class _Vars(dict):
    def __missing__(self, key):
        return "{" + key + "}"


def _number(value: float | None) -> str:
    return "" if value is None else (str(int(value)) if float(value).is_integer() else str(value))


@dataclass
class ScheduleEntry:
    kind: Kind
    count: int | None                 # firings in all (None: unlimited)
    every: int | None                 # fire on every n-th request seen (None: every request)
    params: dict[str, Any]
    seen: int = 0
    fired: int = 0

    def fires(self) -> bool:
        self.seen += 1
        return self.every is None or self.seen % self.every == 0


class FaultInjector:
    """Decides, per request, whether and how it fails; holds the runtime schedule and counters."""

    def __init__(self, kinds: dict[str, Kind], settings, clock, tails: Template, drain: Drain,
                 catalogue=None):
        self.kinds = kinds
        self.drain = drain          # the app's shutdown, which ends the streams it `stops`
        self.clock = clock
        self.tails = tails
        self.catalogue = catalogue
        self.settings = settings
        seed = settings.seed
        self.rng = random.Random(f"llmsim-faults:{seed}") if seed is not None else random.Random()
        self.rates: dict[str, float] = self.check_rates(settings.errors or {}, ConfigError, "errors")
        self.schedule: list[ScheduleEntry] = [
            self.entry(raw, ConfigError, f"fault_schedule[{i}]")
            for i, raw in enumerate(settings.fault_schedule or ())]
        self.requests = 0
        self.injected: Counter[str] = Counter()
        self.shared = None                # the store's shared schedule and rates (see `share`)
        self._rates_raw: bytes | None = None
        self.changed: list[Callable[[], Any]] = []     # called when the schedule or rates change (the pipeline reassembles)

    def share(self, shared) -> None:
        """Keep the schedule and the rates in `shared` (a store's `shared_faults`) from now on."""
        self.shared = shared
        self._seeded = False
        self._changed()

    def _changed(self) -> None:
        for listener in self.changed:
            listener()

    # ---- configuration (config file at start-up, admin endpoint at runtime) ----
    def _kind(self, name, error: type[Exception], where: str) -> Kind:
        if name not in self.kinds:
            raise _raise(error, f"{where}: unknown fault kind {name!r}; known kinds: "
                                f"{', '.join(sorted(self.kinds))}", where)
        return self.kinds[name]

    def check_rates(self, rates: Mapping[str, float], error: type[Exception], where: str) -> dict[str, float]:
        for name, rate in rates.items():
            self._kind(name, error, f"{where}.{name}")
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
                raise _raise(error, f"{where}.{name}: rate must be a number from 0 to 1, got {rate!r}",
                             f"{where}.{name}")
        return {name: float(rate) for name, rate in rates.items() if rate}

    def entry(self, raw: Mapping[str, Any], error: type[Exception], where: str) -> ScheduleEntry:
        kind = self._kind(raw.get("kind"), error, f"{where}.kind")
        for key in ("count", "every"):
            value = raw.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise _raise(error, f"{where}.{key}: must be an integer >= 1, got {value!r}", f"{where}.{key}")
        count = raw.get("count")
        if count is None and raw.get("every") is None:
            count = 1
        params = {k: raw[k] for k in PARAMS if raw.get(k) is not None}
        for key, value in params.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= LIMITS[key]:
                raise _raise(error, f"{where}.{key}: must be a number from 0 to {LIMITS[key]}, got {value!r}",
                             f"{where}.{key}")
        return ScheduleEntry(kind, count, raw.get("every"), params)

    async def update(self, schedule: list | None, replace: bool, rates: Mapping[str, float] | None) -> None:
        """A runtime change (POST /llmsim/faults): schedule entries appended (or replacing the
        schedule), rates replaced; all checked first (400 naming the field), then applied."""
        new = [self.entry(raw, InvalidRequestError, f"schedule[{i}]") for i, raw in enumerate(schedule or ())]
        new_rates = self.check_rates(rates, InvalidRequestError, "errors") if rates is not None else None
        if self.shared is not None:
            await (await self._store()).update([_shared_entry(e) for e in new], replace, new_rates)
            return
        self.schedule = new if replace else [*self.schedule, *new]
        if new_rates is not None:
            self.rates = new_rates
        self._changed()

    async def clear(self) -> None:
        if self.shared is not None:
            await (await self._store()).clear()
            return
        self.schedule = []
        self.rates = {}
        self._changed()

    async def state(self):
        """What GET /llmsim/faults shows (templates/faults.yaml: the `injector`)."""
        if self.shared is None:
            return self
        schedule, rates = await (await self._store()).state()
        return SimpleNamespace(requests=self.requests, injected=self.injected, kinds=self.kinds,
                               rates=rates, schedule=[self._entry_of(raw) for raw in schedule])

    # ---- the shared schedule (a shared store's) ----
    async def _store(self):
        """The shared schedule, once this process's configured schedule and rates are in it."""
        if not self._seeded:
            if self.settings.fault_schedule or self.settings.errors:
                schedule = [_shared_entry(e) for e in self.schedule]
                digest = hashlib.sha256(dumps([schedule, self.rates])).hexdigest()
                await self.shared.seed(digest, schedule, self.rates)
            self._seeded = True
        return self.shared

    def _entry_of(self, raw: Mapping[str, Any]) -> ScheduleEntry:
        return ScheduleEntry(self.kinds[raw["kind"]], raw["count"] or None, raw["every"] or None,
                             dict(raw["params"] or {}), raw["seen"], raw["fired"])

    async def pick_shared(self) -> Fault | None:
        """`pick` for a request with no fault header, the schedule and rates read from the store."""
        self.requests += 1
        draw = self.rng.random()
        try:
            fired, rates_raw = await (await self._store()).pick()
        except ServiceUnavailableError:     # the store is out of reach: the rates last read
            return self._rate(draw)
        if fired is not None:
            entry = self._entry_of(fired)
            return self.make(entry.kind, entry.params, "schedule")
        if rates_raw != self._rates_raw:        # parsed again only when they changed
            self.rates = {} if rates_raw is None else dict(orjson.loads(rates_raw))
            self._rates_raw = rates_raw
        return self._rate(draw)

    # ---- per request ----
    def pick(self, header: str | None) -> Fault | None:
        """The fault for the next request, or None (counts the request, draws once)."""
        self.requests += 1
        draw = self.rng.random()
        if header is not None:
            return self.parse_header(header)
        fired = None
        for entry in self.schedule:         # every entry counts the request; the first to fire wins
            if entry.fires() and fired is None:
                fired = entry
        if fired is not None:
            fired.fired += 1
            if fired.count is not None and fired.fired >= fired.count:
                self.schedule.remove(fired)
            return self.make(fired.kind, fired.params, "schedule")
        return self._rate(draw)

    def _rate(self, draw: float) -> Fault | None:
        if not self.rates:
            return None
        draw *= max(1.0, sum(self.rates.values()))   # rates adding up to more than 1: scaled to 1
        for name, rate in self.rates.items():
            if draw < rate:
                return self.make(self.kinds[name], {}, "rate")
            draw -= rate
        return None

    def parse_header(self, value: str) -> Fault | None:
        name, *parts = [p.strip() for p in value.split(";")]
        if name.lower() == "none" and not parts:
            return None
        kind = self._kind(name, InvalidRequestError, HEADER)
        params = {}
        for part in parts:
            key, eq, raw = part.partition("=")
            key = key.strip()
            if key not in PARAMS or not eq:
                raise InvalidRequestError(
                    f"{HEADER}: unknown parameter {part!r}; use <kind>[;after_tokens=k]"
                    "[;retry_after=s][;timeout_after_ms=ms]", param=HEADER, code="invalid_fault")
            try:
                params[key] = PARAMS[key](raw.strip())
                if not 0 <= params[key] <= LIMITS[key]:    # also refuses nan
                    raise ValueError
            except ValueError:
                raise InvalidRequestError(f"{HEADER}: {key} must be a number from 0 to {LIMITS[key]}, "
                                          f"got {raw.strip()!r}", param=HEADER, code="invalid_fault") from None
        return self.make(kind, params, "header")

    @staticmethod
    def make(kind: Kind, params: Mapping[str, Any], source: str) -> Fault:
        after = params.get("after_tokens")
        return Fault(kind, int(after) if after is not None else None,
                     params.get("retry_after", kind.retry_after),
                     float(params.get("timeout_after_ms", kind.timeout_after_ms)), source)

    def error(self, fault: Fault, api: str, body: Mapping[str, Any]) -> InjectedFault:
        kind = fault.kind.for_api(api)
        model_id = str(body.get("model", ""))
        window = 128000
        if self.catalogue is not None and model_id in getattr(self.catalogue, "models", {}):
            window = self.catalogue.models[model_id].context_window
        values = _Vars(model=model_id, retry_after=_number(fault.retry_after),
                       retry_after_ms=_number(None if fault.retry_after is None else fault.retry_after * 1000),
                       after_tokens=_number(fault.after_tokens),
                       timeout_after_ms=_number(fault.timeout_after_ms), context_window=window, context_window_plus=window + 1,
                       input_param={"chat": "messages", "completions": "prompt"}.get(api, "input"))
        headers = {name: value.format_map(values) for name, value in kind.headers.items()}
        if fault.retry_after is None:
            headers = {k: v for k, v in headers.items() if v != ""}
        return InjectedFault(kind.message.format_map(values), status=kind.status, type=kind.type,
                             code=kind.code, headers=headers,
                             param=kind.param.format_map(values) if kind.param else None)

    def stops(self, api: str) -> bool:
        """Whether a shutdown ends this API's streams with an error (llmsim.pacing.draining):
        WebSocket responses always (the server closes their sockets), the others when
        there is a graceful timeout (without one, they run to their end)."""
        return api == "websocket" or self.settings.graceful_timeout_s is not None

    def begin(self, api: str, body: Mapping[str, Any], headers: Mapping[str, str] | None) -> "Injection":
        """The one call a handler makes per request (api: responses | chat | websocket).

        Raises the fault's APIError when it fails at once, or ConnectionDrop; otherwise returns
        what the fault does to the plan and the stream. When it `waits` (a timeout, or a
        schedule in a shared store), the handler calls `fault = await fault.wait()`, which
        raises the error once the timeout has passed or returns the Injection the store's
        schedule decided (a call, not a coroutine, for every other request).
        """
        header = headers.get(HEADER) if headers else None
        if header is None:
            if self.shared is not None:
                return Injection(self, None, api, body, waits=True)     # the store decides, in `wait()`
            if not self.schedule and not self.rates:        # nothing can fire: no draw
                self.requests += 1
                return self.unfaulted(api, body)
        return self.apply(self.pick(header), api, body)

    def unfaulted(self, api: str, body: Mapping[str, Any]) -> "Injection":
        """A request no fault fired for: NO_FAULT, unless it is a stream a shutdown may have to
        end with its API's error (`stops`), which its Injection renders."""
        if (api == "websocket" or body.get("stream") or body.get("background")) and self.stops(api):
            return Injection(self, None, api, body)
        return NO_FAULT

    def apply(self, fault: Fault | None, api: str, body: Mapping[str, Any]) -> "Injection":
        """What `fault` does to this request (see `begin`)."""
        if fault is None:
            return self.unfaulted(api, body)
        self.injected[fault.kind.name] += 1
        fault_injected(fault.kind.name)  # live stats: errors.injected, the request's trace line
        effect = fault.kind.effect
        streaming = api == "websocket" or bool(body.get("stream"))
        if effect == "timeout":
            return Injection(self, fault, api, body, waits=True)
        if effect in CONTENT:           # the answer changes; it is delivered as usual
            return Injection(self, fault, api, body)
        if not streaming or (effect == "error" and fault.after_tokens is None):
            if effect == "stream_drop":
                raise ConnectionDrop()
            raise self.error(fault, api, body)
        return Injection(self, fault, api, body)


def _shared_entry(entry: ScheduleEntry) -> dict[str, Any]:
    """A schedule entry as a shared store keeps it (0 for an unset count or every)."""
    return {"kind": entry.kind.name, "count": entry.count or 0, "every": entry.every or 0,
            "params": entry.params, "seen": entry.seen, "fired": entry.fired}


def _raise(error: type[Exception], message: str, where: str) -> Exception:
    if issubclass(error, APIError):
        return error(message, param=where, code="invalid_value")
    return error(message)
