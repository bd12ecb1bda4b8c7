"""Runtime control: the live settings (GET /llmsim/config) and their changes (PATCH).

Only settings `llmsim/schemas/config.yaml` marks `patchable: true` change; a change is checked
(schema, then the simulator's `vet`) before anything changes, and applies to requests that
start afterwards: in this process at once, in the other workers at their next request (a
file in the stats directory), on every host sharing a store with a `settings_channel` within
`POLL_S`. Every process applies the changes over its own start-up settings.
The story: docs/internals.md#stateliveconfig.
"""
from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import logging
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import orjson

from llmsim import datafiles
from llmsim.errors import ConfigError, InvalidRequestError

log = logging.getLogger("llmsim")
SOURCE = "PATCH /llmsim/config"
FILE_NAME = "config.json"           # in the workers' stats directory
POLL_S = 0.5


def patchable() -> tuple[str, ...]:
    """The settings a PATCH may change: those the config schema marks `patchable: true`."""
    return tuple(name for name, spec in datafiles.schema("config")["properties"].items()
                 if isinstance(spec, dict) and spec.get("patchable"))


class LiveConfig:
    def __init__(self, settings, store, apply: Callable[[Any], None], vet: Callable[[Any], None]):
        self.base = settings                # the start-up settings every change applies over
        self.current = settings
        self.changes: dict[str, Any] = {}   # every change so far (the shared ones, when shared)
        self.apply, self.vet = apply, vet
        self.names = patchable()
        shared_dir = settings.stats_dir if settings.workers > 1 else None
        self.file = Path(shared_dir) / FILE_NAME if shared_dir else None
        self._stamp: tuple | None = None
        self.channel = store.capabilities.settings_channel     # where every host's changes meet
        self._poller: asyncio.Task | None = None

    @property
    def watches(self) -> bool:
        """Other processes may change the settings (a request starts with `refresh`)."""
        return self.file is not None or self.channel is not None

    # ---- a change ------------------------------------------------------------------
    def check(self, changes: Mapping[str, Any]):
        """The settings `changes` would give; InvalidRequestError (400, naming the key) if bad."""
        if not isinstance(changes, Mapping) or not changes:
            raise InvalidRequestError(f"{SOURCE}: expected a JSON object of setting names to values; "
                                      f"patchable settings: {', '.join(self.names)}", code="invalid_value")
        for name in changes:
            if name not in self.names:
                known = name in (f.name for f in dataclasses.fields(self.base))
                raise InvalidRequestError(
                    f"{SOURCE}: {'setting ' + repr(name) + ' cannot change at runtime' if known else 'unknown setting ' + repr(name)}"
                    f"; patchable settings: {', '.join(self.names)}", param=name, code="invalid_value")
        try:
            datafiles.check(dict(changes), "config", SOURCE)
            settings = dataclasses.replace(self.current, **changes)
            self.vet(settings)
        except ConfigError as exc:
            where = getattr(exc, "where", None) or next(iter(changes))
            raise InvalidRequestError(str(exc), param=where, code="invalid_value") from None
        return settings

    async def patch(self, changes: Mapping[str, Any]) -> None:
        """Check `changes`, then share them and use them here."""
        self.check(changes)
        await self._share(changes, replace=False)

    async def reset(self) -> None:
        """Back to the start-up settings, everywhere (DELETE /llmsim/config)."""
        await self._share({}, replace=True)

    async def _share(self, changes: Mapping[str, Any], replace: bool) -> None:
        """The changes so far, with `changes` (or only them), where every process reads them:
        the shared channel holds every host's; the workers' file then gets what it holds."""
        merged = dict(changes) if replace else {**self.changes, **changes}
        if self.channel is not None:
            merged = await self.channel.publish(changes, replace)
        if self.file is not None:
            merged = self._write_file(merged if self.channel is not None or replace else changes,
                                      replace=self.channel is not None or replace)
        self._use(merged)

    def _use(self, changes: dict[str, Any]) -> None:
        if changes == self.changes:
            return
        try:
            settings = dataclasses.replace(self.base, **changes)
            self.vet(settings)
        except (ConfigError, TypeError) as exc:     # another process's data, not checked here
            log.warning("%s: ignored changes %r: %s", SOURCE, changes, exc)
            return
        self.changes, self.current = changes, settings
        self.apply(settings)

    # ---- the workers' shared file --------------------------------------------------------
    def _write_file(self, changes: Mapping[str, Any], replace: bool) -> dict[str, Any]:
        """The file's changes with `changes` (or, `replace`, only them), written under its lock."""
        self.file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = b"" if replace else os.pread(fd, os.fstat(fd).st_size, 0)
            merged = {**(orjson.loads(raw) if raw else {}), **changes}
            data = orjson.dumps(merged)
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            return merged
        finally:
            os.close(fd)            # (closing releases the lock)

    def refresh(self) -> None:
        """As a request starts: the other processes' changes, if any since the last look."""
        if self.file is not None:
            try:
                st = os.stat(self.file)
            except FileNotFoundError:
                pass
            else:
                stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
                if stamp != self._stamp:
                    self._stamp = stamp
                    self._use(self._read_file())
        if self.channel is not None and self._poller is None:     # (a server without a lifespan)
            self.serving()

    def serving(self) -> None:
        """The server has started: with a store that shares changes, read them every POLL_S."""
        if self.channel is not None and self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def stopped(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None

    def _read_file(self) -> dict[str, Any]:
        fd = os.open(self.file, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            raw = os.pread(fd, os.fstat(fd).st_size, 0)
        finally:
            os.close(fd)
        return orjson.loads(raw) if raw else {}

    # ---- a shared store's channel --------------------------------------------------------
    async def _poll(self) -> None:
        """Read Redis's changes every POLL_S; Redis going away and coming back is logged
        once each (not once a poll)."""
        away = False
        while True:
            try:
                changes = await self.channel.poll_changes()
                if away:
                    log.warning("shared settings: Redis answers again")
                    away = False
                if changes is not None:
                    self._use(changes)
            except asyncio.CancelledError:
                raise
            except Exception as exc:                # Redis away for a while: try again
                if not away:
                    log.warning("shared settings: cannot read them from Redis (%s); retrying every %g s",
                                " ".join(str(exc).split()), POLL_S)
                    away = True
            await asyncio.sleep(POLL_S)
