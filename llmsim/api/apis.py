"""The other providers' APIs: every OpenAPI document in openapi/ with an `x-llmsim` block
(openapi/anthropic.yaml), mounted beside the OpenAI document, each answering errors in its
own envelope. All of it is read from the documents; nothing here names a provider.

A document is mounted under each of its `servers` (`/anthropic/v1`), and every error under
those is rendered by the template `x-llmsim.errors` names. Under each of `x-llmsim.shared`
(base paths the OpenAI document uses: `/v1`) a request is moved under the document's first
server when it carries `x-llmsim.header`, or when its path is one of the document's that the
OpenAI document lacks (`/v1/messages` is `/anthropic/v1/messages`; `GET /v1/models` with
`anthropic-version` is Anthropic's list).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

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


def _shape(path: str) -> str:
    """A path with its parameters unnamed: `/models/{model}` and `/models/{model_id}` are one route."""
    return re.sub(r"\{[^}]*\}", "{}", path)


class Apis:
    def __init__(self, documents: list[Document]):
        self.documents = documents

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
            doc = datafiles.read_yaml(path)
            marks = doc["x-llmsim"]
            own = tuple(server["url"].rstrip("/") for server in doc["servers"])
            mine = [re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(p)) for p in doc["paths"] if _shape(p) not in taken]
            header = marks.get("header")
            documents.append(Document(path, path.stem, own, marks["errors"],
                                      header.lower().encode() if header else None,
                                      tuple(b.rstrip("/") for b in marks.get("shared") or ()),
                                      re.compile("|".join(mine)) if mine else None))
        return cls(documents)

    def errors_for(self, path: str | None) -> str | None:
        """The error template of the document `path` belongs to (None: the OpenAI document's)."""
        if path is not None:
            for doc in self.documents:
                if any(path == base or path.startswith(base + "/") for base in doc.own):
                    return doc.errors
        return None

    def claim(self, scope, headers: dict):
        """The request as served: under a document's own base path when it is the document's
        under a shared one (it carries the document's header, or names one of its paths)."""
        path = scope["path"]
        for doc in self.documents:
            for base in doc.shared:
                if not path.startswith(base + "/"):
                    continue
                rest = path[len(base):]
                if doc.header in headers or (doc.paths is not None and doc.paths.fullmatch(rest)):
                    moved = doc.own[0] + rest
                    return {**scope, "path": moved, "raw_path": moved.encode()}
        return scope
