"""The request a handler serves, as `--server plain` knows it: through connexion's public
`connexion.request`. The tuned server reads the same from connexion's context directly
(llmsim.server.context), for the requests its fast lane serves without connexion.
"""
from __future__ import annotations

import typing as t

from connexion import request


class Current(t.Protocol):
    def received_at(self) -> float | None: ...
    def request_headers(self) -> t.Mapping[str, str]: ...


def received_at() -> None:
    """When the server read the request: stock uvicorn does not say (the handler starts
    the request's simulated time as it runs)."""
    return None


def request_headers() -> t.Mapping[str, str]:
    """The headers of the request being served."""
    return request.headers
