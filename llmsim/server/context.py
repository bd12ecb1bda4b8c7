"""The request being served, as connexion's private context variables hold it
(`connexion.context._scope` / `_receive`): set by the fast lane (llmsim.api.fastpath) for the
operations it serves without connexion, read by handlers (`received_at`, `request_headers`).
"""
from __future__ import annotations

import typing as t

from connexion.context import _receive, _scope
from starlette.datastructures import Headers
from starlette.types import Receive, Scope


def enter(scope: Scope, receive: Receive) -> None:
    """Make `scope` the request being served, as connexion's own routing would."""
    _scope.set(scope)
    _receive.set(receive)


class RequestHeaders(Headers):
    """starlette's Headers of a scope, read in place (not copied into the scope again), whose
    `get` of a missing name does not raise and catch a KeyError."""

    def __init__(self, scope: Scope):  # no super().__init__: sets what it would, without the copy
        self._list = scope["headers"]

    def get(self, key: str, default: t.Any = None) -> t.Any:
        wanted = _NAMES.get(key)
        if wanted is None:
            wanted = key.lower().encode("latin-1")
            if len(_NAMES) < MAX_NAMES:
                _NAMES[key] = wanted
        for name, value in self._list:
            if name == wanted:
                return value.decode("latin-1")
        return default


_NAMES: dict[str, bytes] = {}      # a header name as asked -> as the scope spells it
MAX_NAMES = 256

RECEIVED_AT = "llmsim.received_at"   # scope["extensions"] key: when the server read the request
                                      # (stamped by llmsim.server.corking's protocol)


def received_at() -> float | None:
    """When the server read the request's first bytes (monotonic seconds), if it says."""
    extensions = _scope.get().get("extensions")
    return extensions.get(RECEIVED_AT) if extensions else None


def request_headers() -> RequestHeaders:
    """The headers of the request being served: connexion's `request.headers` without the
    request object it builds behind a LocalProxy, which every request would pay for."""
    return RequestHeaders(_scope.get())

