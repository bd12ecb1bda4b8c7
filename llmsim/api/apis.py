"""The other providers' APIs: every OpenAPI document in openapi/ with an `x-llmsim` block
(openapi/anthropic.yaml, openapi/gemini.yaml), mounted beside the OpenAI document, each
answering errors in its own envelope and taking API keys where its provider does.

Invariant: all of it is read from the documents; nothing here names a provider. Every path
under a document's own base paths is the document's; a request under one of its `shared` base
paths is claimed (moved under the document's first server) by its `header`, a path the OpenAI
document lacks, or `claims`. The `x-llmsim` block and the claiming rules:
docs/internals.md#apiapis.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

from llmsim import datafiles

MARK = b"\nx-llmsim:"       # only documents holding this are parsed


@dataclass(frozen=True)
class Document:
    path: Path
    name: str                      # the file's stem: the connexion API names
    own: tuple[str, ...]           # the base paths it is mounted on (its servers)
    errors: str                    # the error template's name
    header: bytes | None           # claims every request under a shared base path
    shared: tuple[str, ...]        # the base paths it shares with the OpenAI document
    paths: re.Pattern | None       # its paths that the OpenAI document lacks
    key_headers: tuple[bytes, ...]  # headers that may carry an API key (apiKey schemes)
    key_params: tuple[str, ...]    # query parameters that may carry one
    unauthenticated: dict | None = None     # a 401's message: {missing, invalid}, as its provider words it

    def keys(self, scope, headers: dict) -> list[bytes]:
        """The keys the request sends where this document takes them."""
        given = [headers[name].strip() for name in self.key_headers if headers.get(name)]
        if self.key_params and scope.get("query_string"):
            query = parse_qs(scope["query_string"].decode("latin-1"))
            given += [value.strip().encode("latin-1") for name in self.key_params for value in query.get(name, ())]
        return given


def _shape(path: str) -> str:
    """A path with its parameters unnamed: `/models/{model}` and `/models/{model_id}` are one route."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def _document(path: Path, taken: set[str]) -> Document:
    doc = datafiles.read_yaml(path)
    marks = doc["x-llmsim"]
    own = tuple(server["url"].rstrip("/") for server in doc["servers"])
    mine = [re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(p)) for p in doc["paths"] if _shape(p) not in taken]
    if marks.get("claims"):
        mine.append(marks["claims"])
    header = marks.get("header")
    schemes = [s for s in ((doc.get("components") or {}).get("securitySchemes") or {}).values()
               if s.get("type") == "apiKey"]
    return Document(path, path.stem, own, marks["errors"],
                    header.lower().encode() if header else None,
                    tuple(b.rstrip("/") for b in marks.get("shared") or ()),
                    re.compile("|".join(mine)) if mine else None,
                    tuple(s["name"].lower().encode() for s in schemes if s.get("in") == "header"),
                    tuple(s["name"] for s in schemes if s.get("in") == "query"),
                    marks.get("unauthenticated"))


MAX_PATHS = 1024        # paths whose claim is remembered (beyond: worked out each time)


class Apis:
    def __init__(self, documents: list[Document]):
        self.documents = documents
        self.claims: dict[str, tuple] = {}      # path -> its `_claims_of` (empty: no document claims it)
        # path -> the headers that may move it, for a path only a header moves (llmsim.api.front
        # calls `claim` only when one is sent, or the path is not known here yet)
        self.heads: dict[str, frozenset[bytes]] = {}

    @classmethod
    def load(cls, directory: Path, main: Path) -> "Apis":
        """The documents of `directory` besides `main`, the OpenAI document."""
        documents = []
        taken: set[str] | None = None
        for path in sorted(directory.glob("*.yaml")):
            if path == main or MARK not in path.read_bytes():
                continue
            if taken is None:
                taken = {_shape(p) for p in datafiles.read_yaml(main).get("paths") or ()}
            documents.append(_document(path, taken))
        return cls(documents)

    @property
    def bases(self) -> tuple[str, ...]:
        """Every document's own base paths."""
        return tuple(base for doc in self.documents for base in doc.own)

    def of(self, path: str | None) -> Document | None:
        """The document `path` (as served: claimed) belongs to; None: the OpenAI document."""
        if path is not None:
            for doc in self.documents:
                if any(path == base or path.startswith(base + "/") for base in doc.own):
                    return doc
        return None

    def claim(self, scope, headers: dict):
        """The request as served: under a document's own base path when it is the document's
        under a shared one (it carries the document's header, or names one of its paths)."""
        path = scope["path"]
        claims = self.claims.get(path)
        if claims is None:
            claims = self._claims_of(path)
            if len(self.claims) < MAX_PATHS:
                self.claims[path] = claims
                if all(header is not None for header, _ in claims):
                    self.heads[path] = frozenset(header for header, _ in claims)
        for header, moved in claims:
            if header is None or header in headers:
                return {**scope, "path": moved, "raw_path": moved.encode()}
        return scope

    def _claims_of(self, path: str) -> tuple[tuple[bytes | None, str], ...]:
        """In order, the (header, path) pairs that may move a request for `path`: moved to
        that path when it carries that header (None: whatever it carries, the path is the
        document's own). Nothing after a None can claim it."""
        found = []
        for doc in self.documents:
            for base in doc.shared:
                if not path.startswith(base + "/"):
                    continue
                rest = path[len(base):]
                if doc.paths is not None and doc.paths.fullmatch(rest):
                    found.append((None, doc.own[0] + rest))
                    return tuple(found)
                if doc.header is not None:
                    found.append((doc.header, doc.own[0] + rest))
        return tuple(found)
