"""Which API a request path belongs to, and what that API's document declares for it.

Each OpenAPI document besides the main one (openapi.yaml) declares, as data:

* `servers`: the base paths it is mounted on;
* `x-llmsim-errors`: the template that renders its errors (its provider's envelope);
* `components.securitySchemes` of type apiKey: where else an API key may come (a header, a
  query parameter), checked like `Authorization: Bearer` (llmsim.api.guard).

A path is a document's when one of its routes matches it, or when it lies under its home base
path (below) when no other document uses that (`/v1beta/...` is Gemini's, `/v1/...` is
OpenAI's unless a Gemini route matches). Every other path is the main document's: the `errors` template, Bearer keys only.

connexion mounts a document on its first base path of its own (its `home`: `/v1beta`); a
request for one of its routes under a base path it shares with the main document (`/v1`) is
passed on as the same route under `home` (`aliased`). Mounted on `/v1` beside the main document
it would not be reached: connexion answers 405 when the main document's `GET /models/{model}`
matches `/v1/models/gemini-2.5-flash:generateContent` by its path.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from llmsim import datafiles

DEFAULT_ERRORS = "errors"


@dataclass(frozen=True)
class Dialect:
    errors: str = DEFAULT_ERRORS            # the template of its error envelope
    key_headers: tuple[bytes, ...] = ()     # headers that may carry an API key
    key_params: tuple[str, ...] = ()        # query parameters that may carry one


DEFAULT = Dialect()


@dataclass(frozen=True)
class Mount:
    spec: Path
    bases: tuple[str, ...]
    dialect: Dialect
    pattern: re.Pattern
    home: str                               # the base path connexion mounts the document on
    aliases: re.Pattern | None              # its routes under the other (shared) base paths


class Dialects:
    def __init__(self, mounts: list[Mount]):
        self.mounts = mounts

    @classmethod
    def load(cls, specs: Iterable[Path], main_bases: Iterable[str]) -> "Dialects":
        shared = set(main_bases)
        mounts = []
        for spec in specs:
            doc = datafiles.read_yaml(Path(spec)) or {}
            bases = tuple(server["url"].rstrip("/") for server in doc.get("servers") or ())
            schemes = ((doc.get("components") or {}).get("securitySchemes") or {}).values()
            keys = [s for s in schemes if s.get("type") == "apiKey"]
            dialect = Dialect(doc.get("x-llmsim-errors", DEFAULT_ERRORS),
                              tuple(s["name"].lower().encode() for s in keys if s.get("in") == "header"),
                              tuple(s["name"] for s in keys if s.get("in") == "query"))
            routes = [re.escape(path).replace(r"\{", "{").replace(r"\}", "}") for path in doc.get("paths") or {}]
            routes = [re.sub(r"\{[^/}]+\}", "[^/]+", route) + "$" for route in routes]
            own = [base for base in bases if base not in shared]
            home = own[0] if own else bases[0]
            alternatives = [re.escape(base) + route for base in bases for route in routes]
            if own:                         # every path under its home is its own
                alternatives.append(re.escape(home) + "(?:/|$)")
            pattern = re.compile("|".join(alternatives) or "(?!)")
            others = [b for b in bases if b != home]
            aliases = re.compile("(" + "|".join(map(re.escape, others)) + ")(?:" + "|".join(routes) + ")") \
                if others and routes else None
            mounts.append(Mount(Path(spec), bases, dialect, pattern, home, aliases))
        return cls(mounts)

    @property
    def bases(self) -> list[str]:
        return [base for mount in self.mounts for base in mount.bases]

    def aliased(self, path: str) -> str:
        """`path`, or the same route under its document's home base path."""
        for mount in self.mounts:
            if mount.aliases is not None and (found := mount.aliases.match(path)):
                return mount.home + path[found.end(1):]
        return path

    def of(self, path: str) -> Dialect:
        for mount in self.mounts:
            if mount.pattern.match(path):
                return mount.dialect
        return DEFAULT
