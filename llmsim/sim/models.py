"""The model catalogue (data/models.yaml): what each model is, supports and how fast it is.

A request may name a model as its provider lets it: by a snapshot or version (the id and a
suffix the data's `snapshots` pattern matches: `gpt-4o-2024-08-06`, `gemini-2.0-flash-001`)
or by an alias (the data's `aliases`: `claude-sonnet-4-0`), each optionally with such a suffix.
`get` answers such a name with the catalogue's model under the name as sent (`Model.id`), so
answers echo it as the providers do. Any other name is unknown (ModelNotFoundError) unless
any model is allowed.

`served` (the setting served_models: a fleet backend's `models:`) narrows it to those ids, as a
vLLM serving one model does: others are not found and not listed; a served id the catalogue
does not know gets the defaults.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from llmsim import datafiles
from llmsim.errors import ConfigError, ModelNotFoundError


@dataclass(frozen=True, slots=True)
class Model:
    id: str
    owned_by: str
    created: int
    context_window: int
    max_output_tokens: int
    latency: str
    encoding: str
    vision: bool
    efforts: tuple[str, ...]          # empty: not a reasoning model
    default_effort: str | None
    dimensions: int | None = None     # an embedding model's vector size (None: not one)
    shortens: bool = True             # an embedding model accepts `dimensions`

    @property
    def reasons(self) -> bool:
        return bool(self.efforts)


MAX_NAMES = 1024        # snapshot and alias names remembered once resolved


class Catalogue:
    def __init__(self, models: dict[str, Model], allow_any: bool, fallback: Model,
                 served: list[str] | None = None, snapshots: re.Pattern | None = None,
                 aliases: dict[str, str] | None = None):
        self.allow_any = allow_any
        self._fallback = fallback
        self._snapshots = snapshots
        self._aliases = aliases or {}
        self._names: dict[str, Model] = {}      # resolved snapshot and alias names
        if served is not None:      # only these ids; any other is not found
            models = {model_id: models.get(model_id) or self._default(model_id) for model_id in served}
            self.allow_any = False
            self._snapshots, self._aliases = None, {}
        self.models = models

    @classmethod
    def load(cls, path: Path, profiles: set[str], allow_any: bool,
             served: list[str] | None = None) -> "Catalogue":
        doc = datafiles.load(path, "models")
        defaults = {"owned_by": "llmsim", "created": 0, "context_window": 128000,
                    "max_output_tokens": 16384, "latency": "gpt-4o", "encoding": "o200k_base",
                    "vision": True, **(doc.get("defaults") or {})}
        models = {}
        for model_id, spec in doc["models"].items():
            spec = {**defaults, **spec}
            if spec["latency"] not in profiles:
                raise ConfigError(f"{path}: at models.{model_id}.latency: unknown profile "
                                  f"{spec['latency']!r} (expected one of: {', '.join(sorted(profiles))})")
            efforts = tuple(spec.get("reasoning") or ())
            default = spec.get("default_effort") or (("medium" if "medium" in efforts else efforts[0])
                                                     if efforts else None)
            models[model_id] = Model(model_id, spec["owned_by"], spec["created"], spec["context_window"],
                                     spec["max_output_tokens"], spec["latency"], spec["encoding"],
                                     spec["vision"], efforts, default, spec.get("dimensions"),
                                     spec.get("shortens", True))
        fallback = Model("*", defaults["owned_by"], defaults["created"], defaults["context_window"],
                         defaults["max_output_tokens"], defaults["latency"], defaults["encoding"],
                         defaults["vision"], (), None)
        aliases = doc.get("aliases") or {}
        for name, target in aliases.items():
            if target not in models:
                raise ConfigError(f"{path}: at aliases.{name}: {target!r} is not a model of `models`")
        try:
            snapshots = re.compile(doc["snapshots"]) if doc.get("snapshots") else None
        except re.error as exc:
            raise ConfigError(f"{path}: at snapshots: not a regular expression ({exc})") from None
        return cls(models, allow_any, fallback, served, snapshots, aliases)

    def find(self, name: str) -> Model | None:
        """The catalogue's model `name` names (its id, a snapshot of it, an alias), under that
        name; None when it names none."""
        model = self.models.get(name) or self._names.get(name)
        if model is not None:
            return model
        base = self._aliases.get(name, name)
        found = self.models.get(base)
        if found is None and self._snapshots is not None:
            at = name.find("-")
            while found is None and at > 0:         # each split into a stem and a whole suffix
                stem = name[:at]
                if self._snapshots.fullmatch(name, at):
                    found = self.models.get(self._aliases.get(stem, stem))
                at = name.find("-", at + 1)
        if found is None:
            return None
        model = replace(found, id=name)
        if len(self._names) < MAX_NAMES:
            self._names[name] = model
        return model

    def get(self, model_id: str) -> Model:
        """The model, or the defaults when any model is allowed; else ModelNotFoundError."""
        model = self.models.get(model_id) or self.find(model_id)   # (most requests: a catalogue id)
        if model is not None:
            return model
        if self.allow_any:
            return self._default(model_id)
        raise ModelNotFoundError(model_id)

    def _default(self, model_id: str) -> Model:
        return Model(model_id, *[getattr(self._fallback, f) for f in Model.__slots__[1:]])

    def __iter__(self):
        return iter(self.models.values())
