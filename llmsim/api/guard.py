"""`Guard`: what a request must pass before any of it is read (llmsim.api.front asks it first).

* API keys: with `api_keys` configured, requests (HTTP and WebSocket upgrades) under the API
  base paths need `Authorization: Bearer <key>`, or the key where the path's API document
  takes one (its apiKey `securitySchemes`, llmsim.api.apis: Anthropic's `x-api-key`, Gemini's
  `x-goog-api-key` or `?key=`); otherwise 401 `invalid_api_key`. `/health` and `/llmsim/...`
  stay open (with the bare base path `""` too: every other path is the API's).
* Body size: a `content-length` over `max_body_bytes` gets 413 before anything is read; a
  chunked body (no length; connexion would refuse it) is buffered here, 413 at the limit.
* A POST without `content-type` is read as JSON (what curl -d users mean, and what the SDKs send);
  a JSON content type written in other case or spacing (`Application/JSON ; charset=utf-8`)
  goes on as `application/json`, the one spelling both the fast lane and connexion match.
"""
from __future__ import annotations

import hmac

from llmsim.api.validation import replay
from llmsim.errors import APIError, AuthenticationError, PayloadTooLargeError

JSON = b"application/json"
BODY_METHODS = ("POST", "PUT", "PATCH")


class Guard:
    def __init__(self, *, settings, base_paths: tuple[str, ...], admin=lambda path: False, apis=None):
        self.keys = [key.encode() for key in (settings.api_keys or ())]
        self.limit = settings.max_body_bytes
        self.bases = tuple(base for base in base_paths if base)
        self.bare = "" in base_paths    # the API also without a prefix: every path but `admin`'s
        self.admin = admin
        self.apis = apis                # llmsim.api.apis: where else a path's API takes its key

    def check(self, scope, headers: dict) -> None:
        """Raise APIError when the request (`headers`: its headers as a dict) may not go on."""
        if self.keys and self._protected(scope["path"]):
            others = self._other_keys(scope, headers)
            if not self._authorized(headers, others):
                raise _auth_error(headers, others)
        if scope["type"] == "http":
            length = headers.get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.limit:
                raise self._too_large(length.decode("latin-1"))

    def admitted(self, scope, receive, headers: dict):
        """`admit` when no body has to be read for it (one with a length, or none): (scope,
        receive) at once; None for a chunked body, which `admit` reads."""
        self.check(scope, headers)
        if b"content-length" in headers or b"transfer-encoding" not in headers:
            return _typed(scope, headers.get(b"content-type")), receive
        return None

    async def admit(self, scope, receive, headers: dict):
        """(scope, receive) as the app should see them, or None when the client left while
        its chunked body was read; APIError (`check`'s, or the chunked body over the limit)
        when the request may not go on."""
        admitted = self.admitted(scope, receive, headers)
        if admitted is not None:
            return admitted
        scope = _typed(scope, headers.get(b"content-type"))
        # connexion only reads bodies with a content-length: buffer chunked ones here, up to the limit
        body = await self._read_chunked(receive)
        if body is None:
            return None
        if len(body) > self.limit:
            raise self._too_large(f"more than {self.limit}")
        scope = {**scope, "headers": [*[(k, v) for k, v in scope["headers"] if k != b"transfer-encoding"],
                                      (b"content-length", str(len(body)).encode())]}
        return scope, replay(body, receive)

    def _protected(self, path: str) -> bool:
        if self.bare and not self.admin(path):
            return True
        return any(path == base or path.startswith(base + "/") for base in self.bases)

    def _authorized(self, headers: dict, others: list[bytes]) -> bool:
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        given = [token.strip(), *others] if scheme.lower() == b"bearer" else others
        return any(hmac.compare_digest(token, key) for token in given for key in self.keys)

    def _other_keys(self, scope, headers: dict) -> list[bytes]:
        """The keys sent where the path's API document also takes them."""
        document = self.apis.of(scope["path"]) if self.apis is not None else None
        return document.keys(scope, headers) if document is not None else []

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


async def refuse_websocket(scope, send, error: APIError, body: bytes) -> None:
    """Turn a WebSocket upgrade away: with an HTTP answer where the server can send one."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        return await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})
    headers = [(b"content-type", JSON), (b"content-length", str(len(body)).encode()),
               *[(k.encode(), v.encode()) for k, v in error.headers.items()]]
    await send({"type": "websocket.http.response.start", "status": error.status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})


def _auth_error(headers: dict, others: list[bytes]) -> AuthenticationError:
    given = headers.get(b"authorization")
    if not given and not others:
        return AuthenticationError(
            "You didn't provide an API key. You need to provide your API key in an Authorization "
            "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
    token = (given.partition(b" ")[2].strip() if given else others[0]).decode("latin-1")
    shown = f"{token[:3]}{'*' * 4}{token[-4:]}" if len(token) > 8 else "*" * len(token)
    return AuthenticationError(f"Incorrect API key provided: {shown}. You can find your API key "
                               "at https://platform.openai.com/account/api-keys.")


def _typed(scope, content_type: bytes | None):
    """The request as the app reads its content type: without one, JSON if its method has a
    body; a JSON one spelled otherwise, `application/json` (its parameters kept)."""
    if content_type is None:
        if scope["method"] in BODY_METHODS:
            return {**scope, "headers": [*scope["headers"], (b"content-type", JSON)]}
        return scope
    if content_type == JSON:
        return scope
    media_type, sep, parameters = content_type.partition(b";")
    if media_type.strip().lower() != JSON or media_type == JSON:
        return scope
    given = JSON + sep + parameters
    return {**scope, "headers": [(k, given if k == b"content-type" else v) for k, v in scope["headers"]]}
