"""The kinds of value a template holds, named once for the three compilers of templates
(values: `templates.Compiler`; JSON bytes: `jsonwriter`, `jsoncodegen`)."""
from __future__ import annotations

from typing import Any

DIRECTIVES = ("$object", "$for", "$if")     # a mapping with one of these keys is that directive


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
