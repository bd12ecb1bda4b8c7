"""What a store can do beyond the `Store` interface, declared by each backend, checked once.

A backend sets `capabilities` (a `Capabilities`) as it is made; `open_store` checks once that
each object it names has its protocol's methods (a TypeError at start-up: a backend's bug).
Callers take the capability they need, or None when the store has none: nothing outside a
backend probes a store with getattr or reaches into its client or its private methods.
The webhook outbox is no capability: every backend keeps one (`Store.outbox_put`).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class KeepsNow(Protocol):
    """A store that writes at once, without awaiting (the memory store): a stored answer is
    kept from its JSON or, for a stream, as what renders it again (llmsim.state.responses)."""

    def put_json(self, response_id: str, response_json: bytes, status: str, input_items: list[dict],
                 background: bool, conversation: str | None) -> None: ...

    def put_replay(self, response_id: str, status: str, render_response: Callable[[], bytes],
                   render_frames: Callable[[], bytes], events: int, input_items: list[dict],
                   background: bool) -> None: ...


@runtime_checkable
class Leases(Protocol):
    """A store several processes share: who still runs its background responses
    (llmsim.state.background)."""

    async def active_responses(self) -> list[str]:
        """The ids of the responses still queued or in progress."""

    async def renew_lease(self, owner: str, lease_s: float) -> None:
        """The process `owner` is alive for `lease_s` seconds more."""

    async def live_owners(self, owners: Sequence[str]) -> set[str]:
        """Those of `owners` whose lease has not run out."""


@runtime_checkable
class Attempts(Protocol):
    """A counter every process shares: how many requests reached a scenario's error turn with
    one history (llmsim.faults.scripted)."""

    def attempt(self, key: str) -> Awaitable[int]: ...


@runtime_checkable
class SharedFaults(Protocol):
    """The fault schedule and rates every process uses (llmsim.faults.catalogue)."""

    async def pick(self) -> tuple[dict | None, bytes | None]: ...

    async def update(self, entries: list[dict], replace: bool, rates: dict | None) -> None: ...

    async def seed(self, digest: str, entries: list[dict], rates: dict) -> None: ...

    async def clear(self) -> None: ...

    async def state(self) -> tuple[list[dict], dict]: ...


@runtime_checkable
class Buckets(Protocol):
    """Rate-limit token buckets every host shares (llmsim.state.ratelimits), taken atomically."""

    async def take(self, bucket: str, rpm: int, tpm: int, cost: int) -> tuple[float, float, str | None, float]:
        """Requests and tokens left, the bucket refused (or None), seconds to wait for it."""


@runtime_checkable
class SettingsChannel(Protocol):
    """Where the runtime setting changes of every host meet (llmsim.state.liveconfig)."""

    async def publish(self, changes: Mapping[str, Any], replace: bool) -> dict[str, Any]:
        """Add `changes` (or, `replace`, keep only them); every host's changes so far."""

    async def poll_changes(self) -> dict[str, Any] | None:
        """Every host's changes, if they changed since the last call; else None."""


@runtime_checkable
class PrefixTable(Protocol):
    """The serving model's prefix-cache blocks, kept by the store for every process sharing it
    (llmsim.state.prefixcache)."""

    async def lookup(self, model: str, hashes: list[bytes], capacity: int) -> tuple[int, int]:
        """Leading blocks of `hashes` cached (hits), all marked used; blocks now cached."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What one store has beyond `Store` (None: not this store)."""
    keeps_now: KeepsNow | None = None
    leases: Leases | None = None
    attempts: Attempts | None = None
    shared_faults: SharedFaults | None = None
    buckets: Buckets | None = None
    settings_channel: SettingsChannel | None = None
    prefix_table: PrefixTable | None = None

    def check(self, backend: str) -> None:
        """Every capability named has its protocol's methods (a backend's bug otherwise)."""
        for field in fields(self):
            found = getattr(self, field.name)
            protocol = _PROTOCOLS[field.name]
            if found is not None and not isinstance(found, protocol):
                raise TypeError(f"store {backend}: its {field.name} is not a {protocol.__name__}")

    def names(self) -> list[str]:
        return [field.name for field in fields(self) if getattr(self, field.name) is not None]


_PROTOCOLS: dict[str, type] = {"keeps_now": KeepsNow, "leases": Leases, "attempts": Attempts,
                               "shared_faults": SharedFaults, "buckets": Buckets,
                               "settings_channel": SettingsChannel, "prefix_table": PrefixTable}
