"""OpenAPI documents as connexion reads them: every `$ref` resolved in place.

The fast lane (llmsim.api.fastpath) and the Responses WebSocket (llmsim.api.websocket)
validate with the schemas connexion validates the other routes with, so they resolve the
document the same way; connexion's `resolve_refs` is not part of its documented API, so it is
used here only, beside the server's other uses of its internals (llmsim.server.versions pins
the releases they were tested with). So is `validate_each_document_once`, which the fleet's
supervisor installs before it forks its backends (llmsim.fleet.warm).
"""
from __future__ import annotations

import orjson
from connexion.json_schema import resolve_refs


def resolved(document: dict) -> dict:
    """A copy of `document` with each `{"$ref": ...}` replaced by what it names."""
    return resolve_refs(document)


def validate_each_document_once() -> None:
    """From now on in this process, connexion validates a document against the OpenAPI schema
    once: it does each time it builds a Specification (once more per base path), and a
    document found valid before is valid still. Without connexion's private hook, a no-op."""
    from connexion.spec import Specification
    hook = getattr(Specification, "_validate_spec", None)
    validate, valid = getattr(hook, "__func__", None), set()
    if validate is None:
        return

    def validate_once(cls, spec):
        key = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
        if key not in valid:
            validate(cls, spec)
            valid.add(key)
    Specification._validate_spec = classmethod(validate_once)
