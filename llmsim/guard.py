"""`Guard`: the outermost llmsim middleware (pure ASGI), checking a request before any of it is read.

* API keys: with `api_keys` configured, requests (HTTP and WebSocket upgrades) under the API
  base paths need `Authorization: Bearer <key>`; otherwise 401 `invalid_api_key`. `/health`
  and `/llmsim/...` stay open.
* Body size: a `content-length` over `max_body_bytes` gets 413 before anything is read; a
  chunked body (no length; connexion would refuse it) is buffered here, 413 at the limit.
* A POST without `content-type` is read as JSON (what curl -d users mean, and what the SDKs send).
* `ConnectionDrop` (an injected `stream_drop` fault) ends the exchange unfinished, so the
  server closes the connection: mid-body for streams, right after the headers otherwise.
"""
from __future__ import annotations

import hmac
from typing import Callable

from connexion.middleware import MiddlewarePosition

from llmsim.errors import APIError, AuthenticationError, ConnectionDrop, PayloadTooLargeError

Render = Callable[[APIError], bytes]
JSON = b"application/json"


def install(app, *, settings, render: Render, base_paths: tuple[str, ...]) -> None:
    """Add the guard to a connexion app, outside its exception handling (call it first)."""
    app.add_middleware(Guard, position=MiddlewarePosition.BEFORE_EXCEPTION, settings=settings,
                       render=render, base_paths=base_paths)


class Guard:
    def __init__(self, app, *, settings, render: Render, base_paths: tuple[str, ...]):
        self.app = app
        self.keys = [key.encode() for key in (settings.api_keys or ())]
        self.limit = settings.max_body_bytes
        self.render = render
        self.bases = tuple(base_paths)

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        if self.keys and self._protected(scope["path"]) and not self._authorized(headers):
            return await self._deny(scope, send, _auth_error(headers))
        if kind == "websocket":
            return await self.app(scope, receive, send)
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._deny(scope, send, self._too_large(length.decode("latin-1")))
        if b"content-type" not in headers and scope["method"] in ("POST", "PUT", "PATCH"):
            scope = {**scope, "headers": [*scope["headers"], (b"content-type", JSON)]}
        if length is None and b"transfer-encoding" in headers:
            # connexion only reads bodies with a content-length: buffer chunked ones here, up to the limit
            body = await self._read_chunked(receive)
            if body is None:        # the client left
                return
            if len(body) > self.limit:
                return await self._deny(scope, send, self._too_large(f"more than {self.limit}"))
            receive = _replay(body, receive)
            scope = {**scope, "headers": [*[(k, v) for k, v in scope["headers"] if k != b"transfer-encoding"],
                                          (b"content-length", str(len(body)).encode())]}
        started = False

        def tracking_send(message):     # returns send's awaitable: no coroutine of its own
            nonlocal started
            started = True
            return send(message)
        try:
            await self.app(scope, receive, tracking_send)
        except ConnectionDrop:
            if not started:     # headers promising a body that never comes
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", JSON), (b"content-length", b"1024")]})

    def _protected(self, path: str) -> bool:
        return any(path == base or path.startswith(base + "/") for base in self.bases)

    def _authorized(self, headers: dict) -> bool:
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        token = token.strip()
        return scheme.lower() == b"bearer" and any(hmac.compare_digest(token, key) for key in self.keys)

    def _too_large(self, length: str) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"The request body is too large: {length} bytes; the limit is {self.limit} bytes "
            "(setting max_body_bytes).")

    async def _read_chunked(self, receive) -> bytes | None:
        """The whole body (reading stops just past the limit), or None when the client left."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            if size > self.limit or not message.get("more_body"):
                return b"".join(chunks)

    async def _deny(self, scope, send, error: APIError) -> None:
        body = self.render(error)
        headers = [(b"content-type", JSON), (b"content-length", str(len(body)).encode()),
                   *[(k.encode(), v.encode()) for k, v in error.headers.items()]]
        if scope["type"] == "websocket":
            if "websocket.http.response" not in scope.get("extensions", {}):
                return await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})
            await send({"type": "websocket.http.response.start", "status": error.status, "headers": headers})
            return await send({"type": "websocket.http.response.body", "body": body})
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive):
    """A receive channel that hands over the buffered body once, then the real channel."""
    sent = False

    async def replayed():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}
    return replayed


def _auth_error(headers: dict) -> AuthenticationError:
    given = headers.get(b"authorization")
    if not given:
        return AuthenticationError(
            "You didn't provide an API key. You need to provide your API key in an Authorization "
            "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
    token = given.partition(b" ")[2].strip().decode("latin-1")
    shown = f"{token[:3]}{'*' * 4}{token[-4:]}" if len(token) > 8 else "*" * len(token)
    return AuthenticationError(f"Incorrect API key provided: {shown}. You can find your API key "
                               "at https://platform.openai.com/account/api-keys.")
