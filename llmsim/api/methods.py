"""Which HTTP methods each route of our OpenAPI documents accepts: the `Allow` header of a 405.

connexion registers one starlette route per (path, method), so the 405 starlette raises lists
only the methods of the first route whose path matched. This table lists them all.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from llmsim import datafiles

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


class AllowedMethods:
    def __init__(self, routes: list[tuple[re.Pattern, int, tuple[str, ...]]]):
        self.routes = routes          # (pattern, number of path parameters, methods)

    @classmethod
    def load(cls, mounts: Iterable[tuple[Path, Iterable[str]]]) -> "AllowedMethods":
        """`mounts`: (OpenAPI document, the base paths it is mounted on)."""
        routes = []
        for spec, bases in mounts:
            paths = (datafiles.read_yaml(Path(spec)) or {}).get("paths") or {}
            for base in bases:
                for path, item in paths.items():
                    methods = [m.upper() for m in HTTP_METHODS if m in (item or {})]
                    if "GET" in methods and "HEAD" not in methods:
                        methods.append("HEAD")
                    pattern = re.escape(base.rstrip("/") + path).replace(r"\{", "{").replace(r"\}", "}")
                    routes.append((re.compile("^" + re.sub(r"\{[^/}]+\}", "[^/]+", pattern) + "$"),
                                   path.count("{"), tuple(methods)))
        return cls(routes)

    def allow(self, path: str) -> str | None:
        """The `Allow` value for a path of ours, else None: the methods of the matching routes
        with the fewest path parameters (`/responses/input_tokens` before `/responses/{id}`)."""
        matches = [(params, accepted) for pattern, params, accepted in self.routes if pattern.match(path)]
        if not matches:
            return None
        fewest = min(params for params, _ in matches)
        methods: list[str] = []
        for params, accepted in matches:
            if params == fewest:
                methods += [m for m in accepted if m not in methods]
        return ", ".join(methods)
