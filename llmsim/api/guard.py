"""`Guard`: what a request must pass before any of it is read (llmsim.api.front asks it first):
API keys (`Authorization: Bearer`, or where the path's API document takes a key), the admin
key for llmsim's routes that change behaviour, the body's size (`max_body_bytes`: 413), and
the content type a POST's JSON is read as.

Invariants: every key is compared in constant time; a rejected request gets its API's error
envelope; a chunked body is buffered here, so connexion and the fast lane always see a
length. The rules in full: docs/internals.md#apiguard.
"""
from __future__ import annotations

import hmac

from llmsim import datafiles
from llmsim.api.validation import replay
from llmsim.errors import APIError, AuthenticationError, PayloadTooLargeError

JSON = b"application/json"
BODY_METHODS = ("POST", "PUT", "PATCH")


class Access:
    """Who may call llmsim's own routes: openapi/admin.yaml's `x-llmsim-access`."""

    def __init__(self, path=None):
        access = datafiles.read_yaml(path or datafiles.OPENAPI_DIR / "admin.yaml")["x-llmsim-access"]
        self.read_methods = frozenset(method.upper() for method in access["read_methods"])
        self.open_paths = frozenset(access.get("open_paths") or ())


class Guard:
    def __init__(self, *, settings, base_paths: tuple[str, ...], admin=lambda path: False,
                 access: Access | None = None, apis=None):
        self.keys = [key.encode() for key in (settings.api_keys or ())]
        self.admin_key = settings.admin_key.encode() if settings.admin_key else None
        self.access = access or Access()
        self.protect_stats = settings.protect_stats
        self.locked = bool(self.keys or self.admin_key)     # llmsim's own routes need a key
        self.limit = settings.max_body_bytes
        self.bases = tuple(base for base in base_paths if base)
        self.bare = "" in base_paths    # the API also without a prefix: every path but `admin`'s
        self.admin = admin
        self.apis = apis                # llmsim.api.apis: where else a path's API takes its key

    def check(self, scope, headers: dict) -> None:
        """Raise APIError when the request (`headers`: its headers as a dict) may not go on."""
        if self.locked:
            self._check_keys(scope, headers)
        if scope["type"] == "http":
            length = headers.get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.limit:
                raise self._too_large(length.decode("latin-1"))

    def admitted(self, scope, headers: dict):
        """The request's scope as the app should see it, when no body has to be read for it
        (one with a length, or none: `check`, for an HTTP request, in one step); None for a
        chunked body, which `admit_chunked` reads. Raises `check`'s APIError."""
        if self.locked:
            self._check_keys(scope, headers)
        length = headers.get(b"content-length")
        if length is None:
            if b"transfer-encoding" in headers:
                return None
        elif length.isdigit() and int(length) > self.limit:
            raise self._too_large(length.decode("latin-1"))
        content_type = headers.get(b"content-type")
        return scope if content_type == JSON else _typed(scope, content_type)

    async def admit(self, scope, receive, headers: dict):
        """(scope, receive) as the app should see them, or None when the client left while
        its chunked body was read; APIError (`check`'s, or the chunked body over the limit)
        when the request may not go on."""
        admitted = self.admitted(scope, headers)
        if admitted is not None:
            return admitted, receive
        return await self.admit_chunked(scope, receive, headers)

    async def admit_chunked(self, scope, receive, headers: dict):
        """`admit` for a request `admitted` found chunked: its body read whole (connexion
        only reads bodies with a content-length), up to the limit."""
        scope = _typed(scope, headers.get(b"content-type"))
        body = await self._read_chunked(receive)
        if body is None:
            return None
        if len(body) > self.limit:
            raise self._too_large(f"more than {self.limit}")
        scope = {**scope, "headers": [*[(k, v) for k, v in scope["headers"] if k != b"transfer-encoding"],
                                      (b"content-length", str(len(body)).encode())]}
        return scope, replay(body, receive)

    def _check_keys(self, scope, headers: dict) -> None:
        """The API keys, or for llmsim's own routes the admin key (only when some are set)."""
        path = scope["path"]
        if self.admin(path):
            self._check_admin(path, scope.get("method", "GET"), headers)
        elif self.keys and self._protected(path):
            others = self._other_keys(scope, headers)
            if not self._authorized(headers, self.keys, others):
                raise _auth_error(headers, others, self._document(scope))

    def _protected(self, path: str) -> bool:
        if self.bare and not self.admin(path):
            return True
        return any(path == base or path.startswith(base + "/") for base in self.bases)

    def _check_admin(self, path: str, method: str, headers: dict) -> None:
        """A request for one of llmsim's own routes (a WebSocket upgrade reads as a GET)."""
        if method in self.access.read_methods:
            if (self.protect_stats and path not in self.access.open_paths
                    and not self._authorized(headers, [*self.keys, self.admin_key])):
                raise _auth_error(headers)
        elif not self._authorized(headers, [self.admin_key] if self.admin_key else self.keys):
            raise _admin_error(headers, self.admin_key is not None)

    @staticmethod
    def _authorized(headers: dict, keys, others: list[bytes] = ()) -> bool:
        """Whether the request's Bearer token, or a key sent where its API takes one
        (`others`), is one of `keys` (None entries never match); every pair is compared, in
        constant time."""
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        given = [token.strip(), *others] if scheme.lower() == b"bearer" else list(others)
        found = False
        for sent in given:
            for key in keys:
                if key is not None and sent:
                    found |= hmac.compare_digest(sent, key)
        return found

    def _document(self, scope):
        return self.apis.of(scope["path"]) if self.apis is not None else None

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


def _auth_error(headers: dict, others: list[bytes] = (), document=None) -> AuthenticationError:
    """A 401 worded as the API's provider words it: its document's `unauthenticated`
    messages (Anthropic's, Gemini's), else OpenAI's."""
    given = headers.get(b"authorization")
    worded = getattr(document, "unauthenticated", None)
    if worded:
        return AuthenticationError(worded["missing" if not given and not others else "invalid"])
    if not given and not others:
        return AuthenticationError(
            "You didn't provide an API key. You need to provide your API key in an Authorization "
            "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
    token = (given.partition(b" ")[2].strip() if given else others[0]).decode("latin-1")
    shown = f"{token[:3]}{'*' * 4}{token[-4:]}" if len(token) > 8 else "*" * len(token)
    return AuthenticationError(f"Incorrect API key provided: {shown}. You can find your API key "
                               "at https://platform.openai.com/account/api-keys.")


def _admin_error(headers: dict, admin_key: bool) -> AuthenticationError:
    needed = "the admin key (--admin-key)" if admin_key else "one of the API keys (--api-key)"
    if not headers.get(b"authorization"):
        return AuthenticationError(
            f"This route changes how the server behaves and needs {needed}: provide it in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
    return AuthenticationError(f"Incorrect key provided: this route changes how the server behaves "
                               f"and needs {needed}.")


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
