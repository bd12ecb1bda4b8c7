"""The kinds of value a template holds, named once for the three compilers of templates
(values: `templates.Compiler`; JSON bytes: `jsonwriter`, `jsoncodegen`)."""
from __future__ import annotations

import re
from typing import Any, Callable

DIRECTIVES = ("$object", "$for", "$if")     # a mapping with one of these keys is that directive
# "name in expression"; a stream step's loop may unpack each item: "a, b in expression"
LOOP = re.compile(r"^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s+in\s+(.+)$", re.S)
# "prefix{{ dotted.name }}suffix": rendered by concatenation, without a jinja context.
ONE_NAME = re.compile(r"^([^{}%]*)\{\{\s*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*\}\}([^{}%]*)$")


def node_kind(node: Any) -> str:
    """'string', 'list', '$object', '$for', '$if', 'dict' (a plain mapping) or 'const'."""
    if isinstance(node, str):
        return "string"
    if isinstance(node, list):
        return "list"
    if isinstance(node, dict):
        for directive in DIRECTIVES:
            if directive in node:
                return directive
        return "dict"
    return "const"


def entry_key(key: Any) -> str:
    """A `$for`/`$key` entry's key, which must be a string (a JSON object's key)."""
    if not isinstance(key, str):
        raise TypeError(f"a $key must be a string, got {type(key).__name__} {key!r}")
    return key


def loop_names(match: re.Match) -> tuple[str, ...]:
    """The names a LOOP match binds."""
    return tuple(name.strip() for name in match.group(1).split(","))


def bound_names(node: Any, with_keys: bool = True) -> set[str]:
    """Every variable a template binds: loop variables, loop indexes and (`with_keys`)
    `$with` keys."""
    names: set[str] = set()
    if isinstance(node, list):
        for value in node:
            names |= bound_names(value, with_keys)
    elif isinstance(node, dict):
        for key in ("$for", "for"):
            match = LOOP.match(node[key]) if isinstance(node.get(key), str) else None
            if match:
                names.update(loop_names(match))
        if isinstance(node.get("index"), str):
            names.add(node["index"])
        if with_keys and isinstance(node.get("$with"), dict):
            names |= set(node["$with"])
        for value in node.values():
            names |= bound_names(value, with_keys)
    return names


def free_names(node: Any, objects: dict[str, Any], reads: Callable[[str], set[str]],
               seen: frozenset[str] = frozenset()) -> set[str] | None:
    """The variables a value reads from the context it is written in, the objects it embeds
    included (what they bind themselves, `$for` variables and `$with` keys, left out); None
    when that cannot be known (an object that embeds itself, or one named by an expression
    other than "prefix{{ dotted.name }}suffix"). `reads(text)`: the variables a string reads."""
    if isinstance(node, str):
        return reads(node) if "{{" in node or "{%" in node else set()
    if isinstance(node, list):
        return _union([free_names(v, objects, reads, seen) for v in node])
    if not isinstance(node, dict):
        return set()
    if "$for" in node:
        loop = LOOP.match(node["$for"]) if isinstance(node["$for"], str) else None
        body = _union([free_names(node.get(k), objects, reads, seen) for k in ("$do", "$key")])
        if loop is None or body is None:
            return None
        return reads("{{ " + loop.group(2) + " }}") | (body - set(loop_names(loop)))
    if "$object" in node:
        name, extra = node["$object"], node.get("$with") or {}
        one = ONE_NAME.match(name) if isinstance(name, str) else None
        if isinstance(name, str) and "{" not in name:
            picks = [name]
        elif one is not None:
            prefix, suffix = one.group(1), one.group(3)
            picks = [obj for obj in objects if obj.startswith(prefix) and obj.endswith(suffix)
                     and len(obj) > len(prefix) + len(suffix)]
        else:
            return None
        found = [reads(name) if one is not None else set(),
                 *(free_names(v, objects, reads, seen) for v in extra.values())]
        for pick in picks:
            if pick in seen or pick not in objects:
                return None
            inner = free_names(objects[pick], objects, reads, seen | {pick})
            found.append(None if inner is None else inner - set(extra))
        return _union(found)
    return _union([free_names(v, objects, reads, seen) for v in node.values()])


def _union(sets: list[set[str] | None]) -> set[str] | None:
    return None if any(s is None for s in sets) else set().union(*sets)
