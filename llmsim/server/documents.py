"""OpenAPI documents as connexion reads them: every `$ref` resolved in place.

The fast lane (llmsim.api.fastpath) and the Responses WebSocket (llmsim.api.websocket)
validate with the schemas connexion validates the other routes with, so they resolve the
document the same way; connexion's `resolve_refs` is not part of its documented API, so it is
used here only, beside the server's other uses of its internals (llmsim.server.versions pins
the releases they were tested with).
"""
from __future__ import annotations

from connexion.json_schema import resolve_refs


def resolved(document: dict) -> dict:
    """A copy of `document` with each `{"$ref": ...}` replaced by what it names."""
    return resolve_refs(document)
