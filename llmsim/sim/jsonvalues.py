"""A random JSON value that validates against a JSON Schema (a tool's `parameters`):
`value(schema, rng)`.

It looks like what a model asked for that schema writes (required properties present, arrays
usually non-empty). Invariants: every choice comes from `rng`, so a seed fixes the value;
sizes are bounded whatever the schema asks (MAX_SIZE, MAX_DEPTH, HARD_DEPTH): beyond them a
value may not validate, but a hostile schema cannot exhaust memory or the stack. The keywords
it honours: docs/internals.md#simjsonvalues.
"""
from __future__ import annotations

import math
import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

try:  # Python 3.11+
    import re._parser as sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    import sre_parse  # type: ignore[no-redef]

MAX_DEPTH = 6
PRESENT = 0.9           # an optional property's chance to be written, below the top level
HARD_DEPTH = 24
MAX_SIZE = 1000
CITIES = ("Paris, France", "Tokyo, Japan", "Lisbon, Portugal", "Nairobi, Kenya", "Toronto, Canada",
          "Santiago, Chile", "Oslo, Norway", "Seoul, South Korea", "Austin, TX", "Melbourne, Australia")
WORDS = ("alpha", "bravo", "delta", "river", "signal", "garden", "engine", "planet", "letter",
         "music", "answer", "ocean", "forest", "cloud", "bridge", "summer", "quiet", "golden")
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


def value(schema: Any, rng: random.Random) -> Any:
    """A value of `schema` drawn from `rng` (None when the schema is too malformed to follow)."""
    try:
        return _Maker(schema if isinstance(schema, dict) else {}, rng).make(schema, 0, "")
    except (AttributeError, TypeError, ValueError, LookupError, ArithmeticError, RecursionError):
        return None


class _Maker:
    def __init__(self, root: dict, rng: random.Random):
        self.root = root
        self.rng = rng

    def make(self, schema: Any, depth: int, name: str) -> Any:
        if schema is True or schema is None or schema == {}:
            return self._string({}, depth, name)
        if schema is False or not isinstance(schema, dict) or depth > HARD_DEPTH:
            return None
        schema = self._resolve(schema)
        if "allOf" in schema:
            schema = self._merge(schema)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return self.rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                branches = [b for b in schema[key] if self._resolve(b).get("type") != "null"] or schema[key]
                base = {k: v for k, v in schema.items() if k != key}
                branch = self._resolve(self.rng.choice(branches))
                return self.make({**base, **branch}, depth, name)
        kind = self._type(schema)
        return _MAKERS[kind](self, schema, depth, name)

    # -- schema plumbing ------------------------------------------------------------------
    def _resolve(self, schema: Any) -> dict:
        for _ in range(32):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                break
            target: Any = self.root
            for part in schema["$ref"].lstrip("#").strip("/").split("/"):
                if not part:
                    continue
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part, {}) if isinstance(target, dict) else {}
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest} if isinstance(target, dict) else rest
        return schema if isinstance(schema, dict) else {}

    def _merge(self, schema: dict) -> dict:
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            part = self._resolve(part)
            if "allOf" in part:
                part = self._merge(part)
            for key, val in part.items():
                if key == "properties":
                    merged["properties"] = {**merged.get("properties", {}), **val}
                elif key == "required":
                    merged["required"] = list(dict.fromkeys([*merged.get("required", []), *val]))
                else:
                    merged.setdefault(key, val)
        return merged

    def _type(self, schema: dict) -> str:
        kind = schema.get("type")
        if isinstance(kind, list):
            real = [k for k in kind if k != "null"] or ["null"]
            kind = self.rng.choice(real)
        if kind in _MAKERS:
            return kind
        if "properties" in schema or "required" in schema or "additionalProperties" in schema:
            return "object"
        if "items" in schema or "prefixItems" in schema:
            return "array"
        if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
            return "number"
        return "string"

    # -- one maker per type ---------------------------------------------------------------
    def _object(self, schema: dict, depth: int, name: str) -> dict:
        props = schema.get("properties") or {}
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        out: dict[str, Any] = {}
        for key, sub in props.items():
            if key in required or (depth < MAX_DEPTH - 1 and (depth == 0 or self.rng.random() < PRESENT)):
                out[key] = self.make(sub, depth + 1, key)
        for key in required:
            if key not in out:
                out[key] = self.make(schema.get("additionalProperties", {}) if
                                     isinstance(schema.get("additionalProperties"), dict) else {},
                                     depth + 1, key)
        want = min(schema.get("minProperties") or 0, MAX_SIZE)
        spare = [k for k in props if k not in out]
        while len(out) < want and spare:
            key = spare.pop(0)
            out[key] = self.make(props[key], depth + 1, key)
        extra = schema.get("additionalProperties", True)
        n = 0
        while len(out) < want and extra is not False:
            n += 1
            out[f"key_{n}"] = self.make(extra if isinstance(extra, dict) else {}, depth + 1, "")
        return out

    def _array(self, schema: dict, depth: int, name: str) -> list:
        items = schema.get("items")
        prefix = schema.get("prefixItems") or (items if isinstance(items, list) else None)
        lo = min(schema.get("minItems", 0), MAX_SIZE)
        hi = schema.get("maxItems")
        if prefix is not None:
            out = [self.make(s, depth + 1, name) for s in prefix[: hi if hi is not None else len(prefix)]]
            rest = schema.get("items") if isinstance(schema.get("items"), dict) else schema.get("additionalItems", {})
            while len(out) < lo:
                out.append(self.make(rest if isinstance(rest, dict) else {}, depth + 1, name))
            return out
        if depth >= MAX_DEPTH - 1:
            count = lo
        else:
            top = lo + 2 if hi is None else min(hi, lo + 2)
            count = self.rng.randint(min(max(lo, 1), top), top) if top > 0 else 0
        item = items if isinstance(items, dict) else {}
        out: list = []
        if schema.get("uniqueItems"):
            for _ in range(count * 10):
                if len(out) >= count:
                    break
                candidate = self.make(item, depth + 1, name)
                if candidate not in out:
                    out.append(candidate)
            return out
        return [self.make(item, depth + 1, name) for _ in range(count)]

    def _number(self, schema: dict, depth: int, name: str, integer: bool = False) -> int | float:
        lo, hi = _bounds(schema, integer)
        step = schema.get("multipleOf")
        if step:
            first, last = math.ceil(lo / step), math.floor(hi / step)
            result = step * first
            for _ in range(10):  # float steps: prefer a value whose quotient is exact
                result = step * self.rng.randint(first, max(first, last))
                if isinstance(step, int) or float(result / step).is_integer():
                    break
            return int(result) if integer or float(result).is_integer() else result
        if integer:
            return self.rng.randint(math.ceil(lo), max(math.ceil(lo), math.floor(hi)))
        drawn = round(self.rng.uniform(lo, hi), 2)
        return drawn if _within(drawn, schema) else (lo + hi) / 2

    def _integer(self, schema: dict, depth: int, name: str) -> int:
        return self._number(schema, depth, name, integer=True)

    def _boolean(self, schema: dict, depth: int, name: str) -> bool:
        return self.rng.random() < 0.5

    def _null(self, schema: dict, depth: int, name: str) -> None:
        return None

    def _string(self, schema: dict, depth: int, name: str) -> str:
        rng = self.rng
        fmt = schema.get("format")
        pattern = schema.get("pattern")
        if pattern:
            text = _from_pattern(pattern, rng)
        elif fmt in _FORMATS:
            text = _FORMATS[fmt](rng)
        elif any(hint in name.lower() for hint in ("city", "location", "place", "address")):
            text = rng.choice(CITIES)
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
        lo, hi = min(schema.get("minLength", 0), MAX_SIZE), schema.get("maxLength")
        if len(text) < lo:
            text += "x" * (lo - len(text))
        if hi is not None and len(text) > hi:
            text = text[:hi]
        return text


_MAKERS = {"object": _Maker._object, "array": _Maker._array, "number": _Maker._number,
           "integer": _Maker._integer, "boolean": _Maker._boolean, "null": _Maker._null,
           "string": _Maker._string}


def _bounds(schema: dict, integer: bool) -> tuple[float, float]:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    nudge = 1 if integer else 0.01
    if isinstance(ex_lo, (int, float)) and not isinstance(ex_lo, bool):
        lo = ex_lo + nudge if lo is None else max(lo, ex_lo + nudge)
    elif ex_lo is True and lo is not None:
        lo += nudge
    if isinstance(ex_hi, (int, float)) and not isinstance(ex_hi, bool):
        hi = ex_hi - nudge if hi is None else min(hi, ex_hi - nudge)
    elif ex_hi is True and hi is not None:
        hi -= nudge
    if lo is None and hi is None:
        lo, hi = 0, 100
    elif lo is None:
        lo = hi - 100
    elif hi is None:
        hi = lo + 100
    return lo, max(lo, hi)


def _within(x: float, schema: dict) -> bool:
    lo, hi = _bounds(schema, False)
    return lo <= x <= hi


def _date_time(rng: random.Random) -> datetime:
    return EPOCH + timedelta(seconds=rng.randrange(0, 2 * 365 * 86400))


_FORMATS = {
    "date-time": lambda rng: _date_time(rng).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "date": lambda rng: _date_time(rng).strftime("%Y-%m-%d"),
    "time": lambda rng: _date_time(rng).strftime("%H:%M:%SZ"),
    "email": lambda rng: f"{rng.choice(WORDS)}.{rng.choice(WORDS)}@example.com",
    "uri": lambda rng: f"https://example.com/{rng.choice(WORDS)}/{rng.randrange(1000)}",
    "url": lambda rng: f"https://example.com/{rng.choice(WORDS)}/{rng.randrange(1000)}",
    "uuid": lambda rng: "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}".format(
        rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12),
        0x8000 | rng.getrandbits(14), rng.getrandbits(48)),
    "ipv4": lambda rng: ".".join(str(rng.randrange(1, 255)) for _ in range(4)),
    "ipv6": lambda rng: ":".join(f"{rng.getrandbits(16):x}" for _ in range(8)),
    "hostname": lambda rng: f"{rng.choice(WORDS)}.example.com",
    "duration": lambda rng: f"PT{rng.randrange(1, 60)}M",
}


# -- regular expressions: sample a string from the parsed pattern ------------------------
_MAX_REPEAT = 4
_CATEGORIES = {
    "CATEGORY_DIGIT": "0123456789",
    "CATEGORY_SPACE": " ",
    "CATEGORY_WORD": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
    "CATEGORY_NOT_DIGIT": "abcxyz",
    "CATEGORY_NOT_SPACE": "abcxyz",
    "CATEGORY_NOT_WORD": "-",
}


def _from_pattern(pattern: str, rng: random.Random) -> str:
    """A string `re.search(pattern, s)` accepts; a plain word when the pattern is beyond us."""
    try:
        parsed = sre_parse.parse(pattern)
        for _ in range(5):
            text = _emit(parsed, rng)
            if re.search(pattern, text):
                return text
    except (re.error, RecursionError, ValueError, TypeError, KeyError):
        pass
    return rng.choice(WORDS)


def _emit(items, rng: random.Random) -> str:
    out = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "ANY":
            out.append(rng.choice(WORDS[0]))
        elif name == "IN":
            out.append(_choose_in(arg, rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = arg
            lo = min(lo, MAX_SIZE)
            hi = min(hi, lo + _MAX_REPEAT) if hi != sre_parse.MAXREPEAT else lo + _MAX_REPEAT
            out.extend(_emit(sub, rng) for _ in range(rng.randint(lo, max(lo, hi))))
        elif name == "SUBPATTERN":
            out.append(_emit(arg[-1], rng))
        elif name == "ATOMIC_GROUP":
            out.append(_emit(arg, rng))
        elif name == "BRANCH":
            out.append(_emit(rng.choice(arg[1]), rng))
        elif name == "CATEGORY":
            out.append(rng.choice(_CATEGORIES.get(str(arg), "a")))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        else:
            raise ValueError(f"unsupported regex construct {name}")
    return "".join(out)


def _choose_in(parts, rng: random.Random) -> str:
    if parts and str(parts[0][0]) == "NEGATE":
        excluded = _emit_set(parts[1:])
        choices = [c for c in "abcdefghijklmnopqrstuvwxyz0123456789" if c not in excluded]
        return rng.choice(choices or ["~"])
    return rng.choice(_emit_set(parts) or "a")


def _emit_set(parts) -> str:
    chars = []
    for op, arg in parts:
        name = str(op)
        if name == "LITERAL":
            chars.append(chr(arg))
        elif name == "RANGE":
            lo, hi = arg
            chars.extend(chr(c) for c in range(lo, min(hi, lo + 200) + 1))
        elif name == "CATEGORY":
            chars.extend(_CATEGORIES.get(str(arg), ""))
    return "".join(chars)
