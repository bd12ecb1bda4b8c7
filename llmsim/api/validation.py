"""Request bodies, read, parsed and validated in the provider's error language: once, for
connexion (`BodyValidator`) and the tuned server's fast lane (llmsim.api.fastpath) alike.

connexion's own JSON validator builds a jsonschema validator per request and reports
problems as problem+json without the offending parameter. Ours compiles each operation's
schema once, parses with orjson, and raises `InvalidRequestError` whose `param` is the
JSON path of the bad field (`input[2].content[0].type`). An empty body (or `null`) is `{}`
where the operation's body is optional, an error where it is required (`json_body`); a
content type other than JSON is refused with `unsupported_media_type`'s error.
"""
from __future__ import annotations

import json
import re
import typing as t

import orjson
from connexion.json_schema import Draft4RequestValidator, allow_nullable
from connexion.validators import AbstractRequestBodyValidator
from jsonschema import Draft4Validator
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.validators import extend

from llmsim.errors import InvalidRequestError, UnsupportedMediaTypeError

MAX_DEPTH = 64
# OpenAPI 3.0 `nullable: true` admits null on a oneOf/anyOf/allOf schema too (connexion's
# validator honours it only beside `type` and `enum`).
RequestValidator = extend(Draft4RequestValidator, {
    keyword: allow_nullable(Draft4Validator.VALIDATORS[keyword]) for keyword in ("oneOf", "anyOf", "allOf")})
_VALIDATORS: dict[int, t.Any] = {}
# orjson reads integers beyond 64 bits as floats: from 19 digits on (below -2**63)
_BIG_INT = re.compile(rb"\d{19}")


def param_path(path) -> str | None:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def _describe(error: ValidationError) -> tuple[str, str | None]:
    """A message naming the field, and the param path, for the most relevant error."""
    path = list(error.absolute_path)
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else None
        full = param_path(path + ([missing] if missing else []))
        return f"Missing required parameter: '{full}'.", full
    if error.validator == "additionalProperties" and "'" in error.message:
        extra = error.message.split("'")[1]
        full = param_path(path + [extra])
        return f"Unrecognized request argument supplied: {full}", full
    where = param_path(path)
    if error.validator in ("anyOf", "oneOf") and isinstance(error.instance, dict) and "type" in error.instance:
        allowed = sorted({v for s in error.validator_value for v in _type_enum(s)})
        if allowed and error.instance["type"] not in allowed:
            where = param_path(path + ["type"])
            return (f"Invalid value: '{error.instance['type']}'. Supported values are: "
                    f"{', '.join(repr(a) for a in allowed)}.", where)
    if error.validator == "enum":
        allowed = ", ".join(repr(v) for v in error.validator_value if v is not None)  # null: nullable
        return f"Invalid value for '{where}': {_short(error.instance)}. Supported values are: {allowed}.", where
    if error.validator == "type":
        return f"Invalid type for '{where or 'body'}': expected {error.validator_value}, got {type(error.instance).__name__}.", where
    bound = BOUNDS.get(error.validator)
    if bound is not None:
        return f"Invalid '{where or 'body'}': {bound(error.validator_value, error.instance)}", where
    return f"Invalid value for '{where or 'body'}': {error.message}", where


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# Messages for limits a value breaks (limit, value); they never echo a long value back.
BOUNDS = {
    "maximum": lambda v, x: f"number above maximum value. Expected a value <= {v}, but got {_short(x)} instead.",
    "minimum": lambda v, x: f"number below minimum value. Expected a value >= {v}, but got {_short(x)} instead.",
    "maxLength": lambda v, x: f"string too long. Expected a string with maximum length {v}, but got a string with length {len(x)} instead.",
    "minLength": lambda v, x: f"string too short. Expected a string with minimum length {v}, but got a string with length {len(x)} instead.",
    "maxItems": lambda v, x: f"array too long. Expected an array with maximum length {v}, but got an array with length {len(x)} instead.",
    "minItems": lambda v, x: f"array too short. Expected an array with minimum length {v}, but got an array with length {len(x)} instead.",
    "maxProperties": lambda v, x: f"too many properties. Expected an object with at most {v} properties, but got an object with {len(x)} properties instead.",
    "pattern": lambda v, x: f"string does not match pattern. Expected a string that matches the pattern '{v}'.",
}


def _type_enum(schema: dict) -> list[str]:
    resolved = schema
    return list(((resolved.get("properties") or {}).get("type") or {}).get("enum") or [])


def _depth(value, limit: int) -> bool:
    """No value (the root is at depth 1) deeper than `limit`; walked level by level."""
    level = [value]
    for _ in range(limit - 1):          # level k -> level k + 1, up to `limit`
        below = []
        for node in level:
            if isinstance(node, dict):
                below += node.values()
            elif isinstance(node, list):
                below += node
        if not below:
            return True
        level = below
    return not any(node for node in level if isinstance(node, (dict, list)))


def parse_json(body: bytes) -> t.Any:
    """The parsed body (None when empty), or InvalidRequestError saying what is wrong with it."""
    if not body:
        return None
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequestError("The request body is not valid UTF-8.", code="invalid_json") from None
        raise InvalidRequestError(
            f"We could not parse the JSON body of your request: {exc}. (HINT: This likely means "
            "you aren't using your HTTP library correctly.)", code="invalid_json") from None
    # Big integers stay integers. A text with fewer than 19 digits in all has none: its
    # digits are counted in one pass in C before the search, which tries every digit.
    if len(body) - len(body.translate(None, b"0123456789")) >= 19 and _BIG_INT.search(body):
        return json.loads(body)
    return value


def unsupported_media_type(given: str) -> UnsupportedMediaTypeError:
    """The error for a request body of content type `given` where JSON is expected."""
    return UnsupportedMediaTypeError(
        f"Unsupported content type: '{given}'. This API method only accepts "
        f"'application/json' requests, but you specified the header "
        f"'Content-Type: {given}'. Please try again with a supported content type.")


async def read_body(receive, message: dict | None = None) -> bytes:
    """A request's whole body from its ASGI `receive` channel (`message`: the first one, if
    read already)."""
    chunks = []
    while True:
        if message is None:
            message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequestError("The client disconnected before sending the whole body.")
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        message = None


def json_body(raw: bytes, required: bool) -> t.Any:
    """The JSON body `raw` parsed (InvalidRequestError when it is not JSON); an empty one, or
    `null`, is `{}` unless the operation requires a body."""
    body = parse_json(raw)
    if body is None:
        if required:
            raise InvalidRequestError("The request body is empty; a JSON object is required.",
                                      code="invalid_json")
        return {}
    return body


def check_depth(body: t.Any, raw: bytes | None = None) -> None:
    """InvalidRequestError when `body` nests deeper than MAX_DEPTH. Given the JSON text it was
    parsed from, a text with fewer than MAX_DEPTH opening brackets passes unwalked: each level
    below the root needs one."""
    if raw is not None and raw.count(b"{") + raw.count(b"[") < MAX_DEPTH:
        return
    if not _depth(body, MAX_DEPTH):
        raise InvalidRequestError(f"The JSON body is nested deeper than {MAX_DEPTH} levels.",
                                  code="invalid_json")


def compile_schema(schema: dict):
    """A validator for an already-resolved request schema, as the HTTP body validator builds it."""
    return RequestValidator(schema, format_checker=Draft4Validator.FORMAT_CHECKER)


def check(validator, body: t.Any) -> bool:
    """Raise InvalidRequestError (message naming the field, `param` its path) for the most
    relevant problem of a parsed JSON body; shared by HTTP and WebSocket `response.create`.
    An explicit `null` where the schema admits none, for a field that may be left out, is
    taken as absent, as the providers do: the key is removed from `body` (in place). True
    when that happened (the body differs from the text it was parsed from)."""
    check_depth(body)
    errors = list(validator.iter_errors(body))
    if not errors:
        return False
    removed = _drop_nulls(validator, body, errors)
    if removed is None:
        error = best_match(errors)
        message, param = _describe(error)
        raise InvalidRequestError(message, param=param,
                                  code="missing_required_parameter" if error.validator == "required"
                                  else "invalid_value")
    return removed


def _drop_nulls(validator, body: t.Any, errors: list) -> bool | None:
    """Remove the object keys whose `null` value is all that is wrong, while that leaves a
    valid body; None when the body stays invalid (then nothing was removed)."""
    dropped: list[tuple[dict, str]] = []
    while errors:
        found = {}
        for error in errors:
            path = error.absolute_path
            if error.instance is not None or not path or not isinstance(path[-1], str):
                break
            parent = body
            for part in list(path)[:-1]:
                parent = parent[part]
            found[(id(parent), path[-1])] = (parent, path[-1])
        else:
            for parent, key in found.values():
                if key in parent:
                    dropped.append((parent, key))
                    del parent[key]
            errors = list(validator.iter_errors(body))
            continue
        for parent, key in reversed(dropped):     # a required field was null: not ours to excuse
            parent[key] = None
        return None
    return bool(dropped)


# A body schema marked `x-llmsim-handler-checks: true` documents a body its handler checks
# itself, with messages of its own (PATCH /llmsim/config: the config file's).
HANDLER_CHECKS = "x-llmsim-handler-checks"


class BodyValidator(AbstractRequestBodyValidator):
    """JSON body validator with cached compiled schemas and provider-style errors."""

    # Handlers get the body as parsed here (orjson), as on the fast path, not connexion's own
    # parse of the bytes: integers beyond 64 bits are floats, so storing or echoing them works.
    MUTABLE_VALIDATION = True

    @property
    def _validator(self):
        # connexion builds a validator per request; compile each operation's schema once.
        # The cache keeps the schema alive, so its id() stays unique.
        cached = _VALIDATORS.get(id(self._schema))
        if cached is None:
            cached = _VALIDATORS[id(self._schema)] = (
                RequestValidator(self._schema, format_checker=Draft4Validator.FORMAT_CHECKER),
                self._schema)
        return cached[0]

    async def wrap_receive(self, receive, *, scope):
        """The body read, parsed and checked as the fast lane does (`json_body`, `check`),
        and handed on, as parsed, in a new `receive` channel."""
        body = json_body(await read_body(receive), self._required)
        if not self._schema.get(HANDLER_CHECKS):
            check(self._validator, body)
        raw = json.dumps(body).encode()
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(raw)).encode())]}
        return replay(raw, receive), scope


def replay(body: bytes, receive):
    """A receive channel that hands over the buffered body once, then the real channel."""
    sent = False

    async def replayed():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}
    return replayed
