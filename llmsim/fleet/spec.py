"""A fleet file (`llmsim fleet FILE`), read and checked before any backend starts.

The file is checked against `schemas/fleet.yaml`, each backend's `settings:` against the
config schema (through `llmsim.settings`, as a config file is), then what no schema can say:
names unique once replicas are expanded, fixed ports that do not overlap. Every error is one
`ConfigError` line naming the file, the path inside it and the fix. The result is one
`Backend` per process to start: `replicas: N` are N backends `NAME-0 … NAME-(N-1)`, each a
`Settings` of its own (its name as `instance_id`, its `models:` as `served_models`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from llmsim import datafiles
from llmsim.errors import ConfigError
from llmsim.settings import ENV_PREFIX, Settings, build, config_values

MODES = ("refuse", "503", "hang", "slow")
DOWN = frozenset({"refuse", "503", "hang"})     # modes in which a backend counts as down
SLOW_FACTOR = 10.0                              # `slow` without a factor
# Settings the fleet decides for each backend, and what to write instead.
FLEET_OWNED = {"host": "the fleet file's top-level host:", "port": "the backend's port:",
               "config": "the settings themselves", "workers": "replicas: (one process each)",
               "served_models": "the backend's models:", "instance_id": "the backend's name:"}


@dataclass(frozen=True)
class Outage:
    mode: str                   # refuse | 503 | hang | slow
    for_s: float | None         # None: until taken back (DELETE on the control address)
    at_s: float = 0.0           # after the fleet started (scheduled ones)
    factor: float = SLOW_FACTOR

    @property
    def down(self) -> bool:
        return self.mode in DOWN


@dataclass(frozen=True)
class Backend:
    name: str
    port: int                   # 0: any free port (resolved when the fleet binds)
    settings: Settings
    ready_after_s: float
    outages: tuple[Outage, ...]
    where: str                  # "backends[i]": for messages

    @property
    def models(self) -> list[str] | None:
        return self.settings.served_models


@dataclass(frozen=True)
class Fleet:
    path: Path
    host: str
    backends: tuple[Backend, ...]


def load(path: str | Path, environ: Mapping[str, str] | None = None) -> Fleet:
    """The fleet file at `path`, checked; raises ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: file not found (llmsim fleet FILE needs a fleet file; docs/fleet.md)")
    doc = datafiles.load(path, "fleet")
    environ = os.environ if environ is None else environ
    base = Settings.load({}, environ)       # LLMSIM_* variables: every backend's, under its own settings:
    if ENV_PREFIX + "LOG_LEVEL" not in environ:
        base = base.replace(log_level="warning")     # sixteen backends' start-up lines say nothing
    host = doc.get("host", "127.0.0.1")
    backends: list[Backend] = []
    taken: dict[int, str] = {}
    for i, entry in enumerate(doc["backends"]):
        where = f"backends[{i}]"
        source = f"{path}: at {where}.settings"
        values = config_values(entry.get("settings") or {}, source)
        for key in sorted(set(values) & set(FLEET_OWNED)):
            raise ConfigError(f"{source}.{key}: set by the fleet; use {FLEET_OWNED[key]} instead")
        settings = build(base, values, source)
        replicas = entry.get("replicas")
        port = entry.get("port", 0)
        names = [entry["name"]] if replicas is None else [f"{entry['name']}-{n}" for n in range(replicas)]
        if port and port + len(names) - 1 > 65535:
            raise ConfigError(f"{path}: at {where}.port: {port} + {len(names)} replicas passes 65535; "
                              "choose a lower port or 0")
        outages = tuple(_outage(o, f"{path}: at {where}.outages[{k}]")
                        for k, o in enumerate(entry.get("outages") or ()))
        for n, name in enumerate(names):
            own = port + n if port else 0
            if own and own in taken:
                raise ConfigError(f"{path}: at {where}.port: port {own} is also {taken[own]}'s; "
                                  "give each backend its own ports (or 0)")
            if own:
                taken[own] = name
            backends.append(Backend(name, own, settings.replace(host=host, port=own, instance_id=name,
                                                                served_models=entry.get("models")),
                                    float(entry.get("ready_after_s", 0)), outages, where))
    seen: dict[str, str] = {}
    for backend in backends:
        if backend.name in seen:
            raise ConfigError(f"{path}: at {backend.where}.name: {backend.name!r} is also a backend of "
                              f"{seen[backend.name]}; give each backend (and replica) a name of its own")
        seen[backend.name] = backend.where
    return Fleet(path, host, tuple(backends))


def _outage(entry: dict, source: str) -> Outage:
    if "factor" in entry and entry["mode"] != "slow":
        raise ConfigError(f"{source}.factor: only a slow outage has a factor; remove it or use mode: slow")
    return Outage(entry["mode"], float(entry["for_s"]), float(entry["at_s"]),
                  float(entry.get("factor", SLOW_FACTOR)))
