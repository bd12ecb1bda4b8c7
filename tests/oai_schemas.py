"""Validate JSON that llmsim emits against OpenAI's published OpenAPI document
(``$LLMSIM_OPENAI_SPEC``, by default ``../shared/openai/openapi.yaml``), then against the
official SDK's own types (tests/sdk_types.py). Without the document, :func:`validate` runs
the SDK checks only and :func:`spec` skips its test; under CI a missing one fails.
Deliberate departures are listed in ``openapi/departures.yaml``; their ``normalize`` rules
apply to a copy of the instance first. How unions and ``nullable`` are handled:
docs/internals.md#testsoai_schemas.

Public API: :func:`validate`, :func:`validate_response_event`, :func:`validate_ws_error`,
:func:`validate_chat_chunk`, :func:`validate_chat_completion`, :func:`validate_error_body`,
:func:`departures`, :func:`spec`.
"""

from __future__ import annotations

import copy
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import yaml
from jsonschema import _keywords as _js_keywords
from jsonschema.exceptions import ValidationError, best_match, relevance
from jsonschema.validators import extend
from openapi_schema_validator import OAS31Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

REPO_ROOT = Path(__file__).resolve().parents[1]
SPEC_PATH = Path(os.environ.get("LLMSIM_OPENAI_SPEC") or REPO_ROOT.parent / "shared" / "openai" / "openapi.yaml")
MISSING = (f"OpenAI's published OpenAPI document is not at {SPEC_PATH}: get openapi.yaml from "
           "https://github.com/openai/openai-openapi and set LLMSIM_OPENAI_SPEC to its path "
           "(checks against it skipped; the SDK-type checks still run)")


def available() -> bool:
    """Whether OpenAI's document is there; under CI it must be."""
    if SPEC_PATH.is_file():
        return True
    if os.environ.get("CI"):
        raise RuntimeError(MISSING)
    return False
DEPARTURES_PATH = REPO_ROOT / "openapi" / "departures.yaml"

_SPEC_URI = "urn:llmsim:openai-openapi"
_SCHEMAS_PTR = "#/components/schemas/"
_STREAM_UNION = "ResponseStreamEvent"
_MAX_MSG = 400  # characters of each validator message kept in AssertionErrors
_MAX_LISTED = 5  # errors listed in one AssertionError

_lock = threading.RLock()
_spec: dict | None = None
_registry: Registry | None = None
_validators: dict[str, Any] = {}
_event_schemas: dict[str, str] | None = None
_departures: list[dict] | None = None
_rules: list[tuple[str, dict, str, Any]] | None = None
_union_maps: dict[int, tuple[dict[Any, Any], bool]] = {}


# --------------------------------------------------------------------------
# public API


def validate(schema_name: str, instance: Any) -> None:
    """Assert that ``instance`` matches ``#/components/schemas/<schema_name>``.

    Departure normalisations are applied to a copy first; ``instance`` is never
    modified. Raises AssertionError naming the schema, the JSON path and the
    validator message.
    """
    if not available():
        return _sdk_check(schema_name, instance)
    validator = _validator(schema_name)
    normalized, applied = _normalize(instance)
    errors = list(validator.iter_errors(normalized))
    if errors:
        raise AssertionError(_format_errors(schema_name, errors, applied))
    _sdk_check(schema_name, instance)


def validate_response_event(event: dict) -> None:
    """Validate a Responses streaming event against the schema for its ``type``.

    The schema is chosen from the event's ``type`` (e.g.
    ``response.output_text.delta`` -> ``ResponseTextDeltaEvent``); members of
    ``ResponseStreamEvent`` win when several schemas claim the same type.
    Raises AssertionError for a missing or unknown type.
    """
    if not isinstance(event, dict):
        raise AssertionError(f"stream event must be a JSON object, got {type(event).__name__}")
    event_type = event.get("type")
    if not available():
        return _sdk_check("ResponseStreamEvent", event)
    schema_name = _event_table().get(event_type) if isinstance(event_type, str) else None
    if schema_name is None:
        raise AssertionError(
            f"unknown Responses stream event type {event_type!r}: no schema in the "
            f"OpenAI document has properties.type.enum == [{event_type!r}]"
        )
    validate(schema_name, event)
    _sdk_check("ResponseStreamEvent", event)


def validate_ws_error(event: dict) -> None:
    """Validate a Responses WebSocket error frame against ``ResponseWsError``."""
    validate("ResponseWsError", event)


def validate_chat_chunk(chunk: dict) -> None:
    """Validate a Chat Completions stream chunk (``CreateChatCompletionStreamResponse``)."""
    validate("CreateChatCompletionStreamResponse", chunk)


def validate_chat_completion(body: dict) -> None:
    """Validate a non-streamed Chat Completions body (``CreateChatCompletionResponse``)."""
    validate("CreateChatCompletionResponse", body)


def validate_error_body(body: dict) -> None:
    """Validate an HTTP error body (``ErrorResponse``: ``{"error": {type, message, param, code}}``)."""
    validate("ErrorResponse", body)


def departures() -> list[dict]:
    """Return the parsed entries of ``openapi/departures.yaml`` (do not mutate)."""
    _load_departures()
    assert _departures is not None
    return _departures


def spec() -> dict:
    """Return the parsed OpenAI OpenAPI document (shared, parsed once; do not mutate); without
    it, skip the test asking for it."""
    if not available():
        import pytest
        pytest.skip(MISSING)
    _load_spec()
    assert _spec is not None
    return _spec


def _sdk_check(schema_name: str, instance: Any) -> None:
    """The same object against the newest SDK's types (tests/sdk_types.py): it must parse,
    and carry no field the SDK does not declare unless a departure excuses it."""
    import sdk_types  # imports this module

    sdk_types.check(schema_name, instance)


# --------------------------------------------------------------------------
# spec loading and validators


def _load_spec() -> None:
    global _spec, _registry
    if _spec is not None:
        return
    with _lock:
        if _spec is not None:
            return
        if not SPEC_PATH.is_file():
            raise FileNotFoundError(f"OpenAI OpenAPI document not found at {SPEC_PATH}")
        with SPEC_PATH.open("rb") as fh:
            doc = yaml.load(fh, Loader=yaml.CSafeLoader)
        # The OpenAPI document is not itself a JSON Schema, but registering it
        # as a 2020-12 resource lets "#/components/schemas/..." refs resolve.
        _registry = Registry().with_resource(_SPEC_URI, DRAFT202012.create_resource(doc))
        _spec = doc


def _schemas() -> dict:
    return spec()["components"]["schemas"]


def _validator(schema_name: str) -> Any:
    validator = _validators.get(schema_name)
    if validator is not None:
        return validator
    with _lock:
        validator = _validators.get(schema_name)
        if validator is None:
            if schema_name not in _schemas():
                raise KeyError(f"no schema {schema_name!r} in {SPEC_PATH}")
            validator = _Validator(
                {"$ref": f"{_SPEC_URI}{_SCHEMAS_PTR}{schema_name}"},
                registry=_registry,
                format_checker=None,  # lenient: formats are annotations only
            )
            _validators[schema_name] = validator
    return validator


def _resolve_local(node: Any) -> Any:
    """Follow local ``$ref`` pointers into the spec (no JSON Schema semantics)."""
    seen = 0
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and seen < 20:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            return None
        node = spec()
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        seen += 1
    return node


def _claimed_values(member: Any, prop: str) -> list[Any]:
    """Values of ``prop`` that a union member accepts, from its enum/const."""
    node = _resolve_local(member)
    if not isinstance(node, dict):
        return []
    parts = [node] + [_resolve_local(p) for p in node.get("allOf", ())]
    for part in parts:
        if not isinstance(part, dict):
            continue
        prop_schema = _resolve_local((part.get("properties") or {}).get(prop))
        if isinstance(prop_schema, dict):
            if "const" in prop_schema:
                return [prop_schema["const"]]
            if isinstance(prop_schema.get("enum"), list):
                return list(prop_schema["enum"])
    return []


def _union_map(schema: dict, members: list, prop: str) -> tuple[dict[Any, Any], bool]:
    """For one anyOf/oneOf with a discriminator: (value -> member schema, closed).

    ``closed`` is true when every member declares its values and none is
    claimed twice, so any other value can be rejected outright.
    """
    key = id(schema)
    cached = _union_maps.get(key)
    if cached is not None:
        return cached
    mapping: dict[Any, Any] = {}
    ambiguous = set()
    closed = True
    for member in members:
        values = _claimed_values(member, prop)
        closed = closed and bool(values)
        for value in values:
            if value in mapping and mapping[value] is not member:
                ambiguous.add(value)
            mapping[value] = member
    for value, ref in (schema["discriminator"].get("mapping") or {}).items():
        mapping[value] = {"$ref": ref}
        ambiguous.discard(value)
    for value in ambiguous:
        del mapping[value]
    cached = _union_maps[key] = (mapping, closed and not ambiguous)
    return cached


def _discriminated(plain):
    def keyword(validator, members, instance, schema) -> Iterator[ValidationError]:
        disc = schema.get("discriminator")
        if isinstance(disc, dict) and isinstance(instance, dict):
            prop = disc.get("propertyName")
            value = instance.get(prop)
            mapping, closed = _union_map(schema, members, prop)
            try:
                target = mapping.get(value)
            except TypeError:  # unhashable discriminator value
                target = None
            if target is not None:
                index = next((i for i, m in enumerate(members) if m is target), None)
                yield from validator.descend(instance, target, schema_path=index)
                return
            if closed:
                yield ValidationError(
                    f"{prop} {value!r} matches no member of this union; "
                    f"expected one of {sorted(map(str, mapping))}"
                )
                return
        yield from plain(validator, members, instance, schema)

    return keyword


def _nullable(keyword_fn):
    """Honour OAS 3.0 ``nullable: true``, which OpenAI's 3.1 document still uses
    (e.g. ``finish_reason`` and ``usage`` in ``CreateChatCompletionStreamResponse``):
    null passes the keywords that would otherwise reject it."""

    def keyword(validator, value, instance, schema) -> Iterator[ValidationError]:
        if instance is None and schema.get("nullable") is True:
            return
        yield from keyword_fn(validator, value, instance, schema)

    return keyword


_ref_cache: dict[tuple[str, str], tuple[Any, Any]] = {}


def _cached_ref(validator, ref, instance, schema) -> Iterator[ValidationError]:
    """``$ref`` with resolution memoised per (base URI, ref).

    Safe because the document uses no ``$dynamicRef``/``$dynamicAnchor``, so the
    resolver's dynamic scope never matters. Saves ~25% on whole-Response events.
    """
    resolver = validator._resolver
    key = (resolver._base_uri, ref)
    hit = _ref_cache.get(key)
    if hit is None:
        resolved = resolver.lookup(ref)
        hit = _ref_cache[key] = (resolved.contents, resolved.resolver)
    yield from validator.descend(instance, hit[0], resolver=hit[1])


_Validator = extend(
    OAS31Validator,
    {
        "$ref": _nullable(_cached_ref),
        "anyOf": _nullable(_discriminated(_js_keywords.anyOf)),
        "oneOf": _nullable(_discriminated(_js_keywords.oneOf)),
        # plain allOf: openapi-schema-validator's would chase the broken implicit
        # discriminator mapping too
        "allOf": _nullable(_js_keywords.allOf),
        **{
            name: _nullable(OAS31Validator.VALIDATORS[name])
            for name in ("type", "enum", "const")
        },
    },
)


def _event_table() -> dict[str, str]:
    """Event ``type`` value -> schema name, built once by scanning the spec."""
    global _event_schemas
    if _event_schemas is not None:
        return _event_schemas
    with _lock:
        if _event_schemas is not None:
            return _event_schemas
        schemas = _schemas()
        union = schemas[_STREAM_UNION]
        members = {
            m["$ref"][len(_SCHEMAS_PTR):]
            for m in union.get("anyOf", []) + union.get("oneOf", [])
            if isinstance(m, dict) and str(m.get("$ref", "")).startswith(_SCHEMAS_PTR)
        }
        candidates: dict[str, list[tuple[int, int, str]]] = {}
        for order, (name, schema) in enumerate(schemas.items()):
            if not isinstance(schema, dict) or schema.get("type") != "object":
                continue
            type_schema = (schema.get("properties") or {}).get("type")
            if not isinstance(type_schema, dict):
                continue
            enum = type_schema.get("enum")
            if "const" in type_schema:
                enum = [type_schema["const"]]
            if not (isinstance(enum, list) and len(enum) == 1 and isinstance(enum[0], str)):
                continue
            # Preference: stream-union members, then non-Beta schemas, then document order.
            rank = (0 if name in members else 1 if not name.startswith("Beta") else 2)
            candidates.setdefault(enum[0], []).append((rank, order, name))
        _event_schemas = {t: min(c)[2] for t, c in candidates.items()}
    return _event_schemas


def _format_errors(schema_name: str, errors: list[ValidationError], applied: list[str]) -> str:
    def one(err: ValidationError) -> str:
        msg = err.message
        if len(msg) > _MAX_MSG:
            msg = msg[:_MAX_MSG] + "...<truncated>"
        schema_path = "/".join(str(p) for p in err.absolute_schema_path)
        return f"at {err.json_path}: {msg}  [schema path: {schema_path}]"

    best = best_match(errors)
    others = sorted((e for e in errors if e is not best), key=relevance)
    lines = [f"instance does not match OpenAI schema {schema_name!r}: {one(best)}"]
    for err in others[: _MAX_LISTED - 1]:
        lines.append(f"  also {one(err)}")
    if len(others) > _MAX_LISTED - 1:
        lines.append(f"  ... and {len(others) - (_MAX_LISTED - 1)} more error(s)")
    if applied:
        lines.append(f"  (departures applied before validating: {', '.join(applied)})")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# departures


def _load_departures() -> None:
    global _departures, _rules
    if _departures is not None:
        return
    with _lock:
        if _departures is not None:
            return
        with DEPARTURES_PATH.open("rb") as fh:
            doc = yaml.load(fh, Loader=yaml.CSafeLoader) or {}
        entries = doc.get("departures") or []
        rules = []
        seen = set()
        for entry in entries:
            where = f"{DEPARTURES_PATH}: departure {entry.get('id')!r}"
            missing = {"id", "where", "ours", "openai", "why", "normalize"} - set(entry)
            if missing:
                raise ValueError(f"{where} lacks {sorted(missing)}")
            if entry["id"] in seen:
                raise ValueError(f"{where} is listed twice")
            seen.add(entry["id"])
            rule = entry["normalize"]
            if rule is None:
                continue
            unknown = set(rule) - {"match", "field", "null_to", "from", "to"}
            forms = ("null_to" in rule) + ("from" in rule and "to" in rule)
            if unknown or "field" not in rule or forms != 1:
                raise ValueError(
                    f"{where}: normalize needs `field` and `null_to`, or `field`, `from` and `to` "
                    f"(optional `match`), got keys {sorted(rule)}"
                )
            match = rule.get("match") or {}
            if not isinstance(match, dict):
                raise ValueError(f"{where}: normalize.match must be a mapping")
            if "null_to" in rule:
                rules.append((entry["id"], match, rule["field"], None, rule["null_to"]))
            else:
                rules.append((entry["id"], match, rule["field"], rule["from"], rule["to"]))
        _rules = rules
        _departures = entries


def _normalize(instance: Any) -> tuple[Any, list[str]]:
    """Apply every departure rule; copy-on-write, so ``instance`` is untouched."""
    _load_departures()
    if not _rules:
        return instance, []
    applied: list[str] = []
    return _walk(instance, _rules, applied), sorted(set(applied))


def _walk(node: Any, rules: list, applied: list[str]) -> Any:
    if isinstance(node, dict):
        out = None
        for key, value in node.items():
            new = _walk(value, rules, applied)
            if new is not value:
                if out is None:
                    out = dict(node)
                out[key] = new
        for dep_id, match, field, old, null_to in rules:
            if field in node and node[field] == old and type(node[field]) is type(old) and all(
                k in node and node[k] == v for k, v in match.items()
            ):
                if out is None:
                    out = dict(node)
                out[field] = copy.deepcopy(null_to)
                applied.append(dep_id)
        return node if out is None else out
    if isinstance(node, list):
        out = None
        for i, value in enumerate(node):
            new = _walk(value, rules, applied)
            if new is not value:
                if out is None:
                    out = list(node)
                out[i] = new
        return node if out is None else out
    return node
