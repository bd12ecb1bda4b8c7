"""The kinds of value a template holds, named once for the three compilers of templates
(values: `templates.Compiler`; JSON bytes: `jsonwriter`, `jsoncodegen`)."""
from __future__ import annotations

import re
from typing import Any

DIRECTIVES = ("$object", "$for", "$if")     # a mapping with one of these keys is that directive
LOOP = re.compile(r"^\s*([A-Za-z_]\w*)\s+in\s+(.+)$", re.S)     # "name in expression"
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


def bound_names(node: Any) -> set[str]:
    """Every variable a template binds: loop variables, loop indexes and `$with` keys."""
    names: set[str] = set()
    if isinstance(node, list):
        for value in node:
            names |= bound_names(value)
    elif isinstance(node, dict):
        for key in ("$for", "for"):
            match = LOOP.match(node[key]) if isinstance(node.get(key), str) else None
            if match:
                names.add(match.group(1))
        if isinstance(node.get("index"), str):
            names.add(node["index"])
        if isinstance(node.get("$with"), dict):
            names |= set(node["$with"])
        for value in node.values():
            names |= bound_names(value)
    return names
