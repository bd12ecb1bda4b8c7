"""Precompiled dispatch for the JSON-body operations of our OpenAPI document marked
`x-llmsim-fast-lane: true`: the tuned server's fast lane (`--server plain` has none).

Invariants: the OpenAPI document stays the single source of routes and request schemas (it
is compiled once, path -> handler and validators); a body is parsed and validated as
connexion would and a bad one names the same field (tests/test_fastlane_differential.py);
every other request goes on to connexion unchanged. How: docs/internals.md#apifastpath; why it
is kept: docs/performance.md#what-is-kept-for-speed.
"""
from __future__ import annotations

import typing as t
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema_rs
from starlette.types import Receive, Scope

from llmsim import datafiles
from llmsim.api.validation import (check, check_depth, compile_schema, json_body, read_body,
                                   unsupported_media_type)
from llmsim.server.context import RECEIVED_AT, enter
from llmsim.server.documents import resolved

JSON = b"application/json"


@dataclass(frozen=True, slots=True)
class Operation:
    handler: t.Callable[[dict], t.Awaitable[t.Any]]
    fast: t.Any          # jsonschema_rs validator: the happy path
    full: t.Any          # jsonschema validator: names the bad field
    optional: bool = False   # requestBody.required is false: no body reads as {}
    # the handler's object, when it answers a body read at a time (a generating operation:
    # llmsim.api.handlers.generate, whose `received` each pipeline assembly sets), which
    # needs no request context set
    generating: t.Any = None
    # bodies (JSON text) found valid: a load test sends the same body again and again
    valid: set[bytes] = field(default_factory=set, compare=False)

    def check(self, body: t.Any, raw: bytes) -> None:
        """Raise InvalidRequestError, naming the field, unless `body` (parsed from `raw`) is
        valid. The first `MAX_VALID` valid bodies of up to `MAX_VALID_SIZE` bytes are
        remembered in `valid`, which `call` looks in first: the same text parses to the
        same value."""
        if not self.fast.is_valid(body):
            if check(self.full, body):  # raises, naming the field (its depth checked first)
                return                  # explicit nulls were dropped: `raw` is not the body checked
        else:
            check_depth(body, raw)
        if len(raw) <= MAX_VALID_SIZE and len(self.valid) < MAX_VALID:
            self.valid.add(raw)

    async def call(self, scope: Scope, receive: Receive, content_type: bytes | None):
        """Read, parse and validate the JSON body of a request for this operation (sent with
        `content_type`, its header as received; None: none, read as JSON), then run its
        handler: what the handler returns (a response). Raises APIError for a body it refuses."""
        if content_type is not None and content_type != JSON and not _is_json(content_type):
            raise unsupported_media_type(content_type.decode("latin-1"))
        message = await receive()       # (the whole body, mostly: read_body for the rest)
        raw = message.get("body", b"") if message["type"] == "http.request" and not message.get("more_body") \
            else await read_body(receive, message)
        body = json_body(raw, not self.optional)
        if raw not in self.valid:
            self.check(body, raw)
        if self.generating is not None:
            extensions = scope.get("extensions")
            return await self.generating.received(body, extensions.get(RECEIVED_AT) if extensions else None)
        enter(scope, receive)      # handlers may read `connexion.request` or `request_headers()`
        return await self.handler(body)


MAX_VALID = 1024
MAX_VALID_SIZE = 2048


def nullable_to_types(schema: t.Any) -> t.Any:
    """OpenAPI 3.0 `nullable: true` in JSON Schema terms, for a plain JSON Schema validator."""
    if isinstance(schema, list):
        return [nullable_to_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: nullable_to_types(v) for k, v in schema.items() if k not in ("nullable", "discriminator",
                                                                           "example", "deprecated")}
    if schema.get("nullable"):
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        elif "type" not in out:
            out = {"anyOf": [{"type": "null"}, out]}
    return out


def json_operations(spec: Path | dict, base_paths: t.Iterable[str], resolve) -> dict[str, Operation]:
    """path -> Operation for every POST the document (a path, or the document as read: llmsim.api.compat)
    marks `x-llmsim-fast-lane` (its only input a JSON request body)."""
    spec = resolved(datafiles.read_yaml(spec) if isinstance(spec, Path) else spec)
    ops = {}
    for path, item in (spec.get("paths") or {}).items():
        post = item.get("post")
        if not post or not post.get("x-llmsim-fast-lane") or post.get("parameters") or item.get("parameters") or "{" in path:
            continue
        schema = (((post.get("requestBody") or {}).get("content") or {})
                  .get("application/json") or {}).get("schema")
        if schema is None:
            continue
        handler = resolve(post["operationId"])
        op = Operation(handler, jsonschema_rs.Draft4Validator(nullable_to_types(schema)),
                       compile_schema(schema), not post["requestBody"].get("required", False),
                       _generating(getattr(handler, "__self__", None)))
        for base in base_paths:
            ops[base.rstrip("/") + path] = op
    return ops


def _is_json(content_type: bytes) -> bool:
    """Whether a content type reads as JSON: `application/json`, in any case and spacing, with
    any parameters (as llmsim.api.guard passes it to connexion)."""
    return content_type.partition(b";")[0].strip().lower() == JSON


def _generating(owner: t.Any) -> t.Any:
    """The handler's object when it has `received` (a generating operation's), else None."""
    return owner if hasattr(owner, "received") else None
