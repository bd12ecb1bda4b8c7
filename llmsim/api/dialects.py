"""Which API a request path belongs to, and what that API's document declares for it.

Each OpenAPI document besides the main one (openapi.yaml) declares, as data:

* `servers`: the base paths it is mounted on;
* `x-llmsim-errors`: the template that renders its errors (its provider's envelope);
* `components.securitySchemes` of type apiKey: where else an API key may come (a header, a
  query parameter), checked like `Authorization: Bearer` (llmsim.api.guard).

A path is a document's when one of its routes matches it, or when it lies under a base path no
other document uses (`/v1beta/...` is Gemini's, `/v1/...` is OpenAI's unless a Gemini route
matches). Every other path is the main document's: the `errors` template, Bearer keys only.
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
            own = [re.escape(base) + "(?:/|$)" for base in bases if base not in shared]
            alternatives = [re.escape(base) + route for base in bases for route in routes] + own
            mounts.append(Mount(Path(spec), bases, dialect, re.compile("|".join(alternatives) or "(?!)")))
        return cls(mounts)

    def of(self, path: str) -> Dialect:
        for mount in self.mounts:
            if mount.pattern.match(path):
                return mount.dialect
        return DEFAULT
