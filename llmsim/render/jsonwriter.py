"""Template values compiled straight to JSON bytes.

`templates.Compiler` turns a template value into `f(ctx) -> value`; serialising that value
afterwards walks it a second time. `JsonCompiler` turns the same YAML into
`w(ctx) -> bytes | None` (None: the value is `omit`) that writes the JSON as it goes:
every sub-tree without expressions is serialised once, at start-up, and a dict with a few
expressions costs a join of precomputed `"key":` prefixes and a `dumps` per expression.
The bytes are exactly those of `dumps(f(ctx))`: same keys, same order, same values.
"""
from __future__ import annotations

from typing import Any, Callable

import orjson

from llmsim.errors import ConfigError
from llmsim.render.jsonbytes import dumps
from llmsim.render.template_syntax import node_kind

Writer = Callable[[dict], "bytes | None"]


class ConstJson:
    """A value without expressions, serialised at compile time."""
    __slots__ = ("json",)

    def __init__(self, json: bytes | None):
        self.json = json

    def __call__(self, ctx):
        return self.json


def _key(key: Any) -> bytes:
    """`"key":`, spelled as the serialiser spells a key of this type."""
    return dumps({key: 0})[1:-2]


class JsonCompiler:
    """The JSON-bytes twin of `templates.Compiler` (which it asks for leaf expressions)."""

    def __init__(self, compiler, omit, const_type: type):
        self.compiler = compiler
        self.omit = omit
        self.const_type = const_type        # the compiler's node for a value without expressions
        self.objects: dict[str, Writer] = {}
        self._kinds = {"string": lambda node, where: self._leaf(compiler.string(node, where), where),
                       "list": self._list, "$object": self._object, "$for": self._for,
                       "$if": self._if, "dict": self._dict,
                       "const": lambda node, where: ConstJson(dumps(node))}

    def value(self, node: Any, where: str) -> Writer:
        return self._kinds[node_kind(node)](node, where)

    def _leaf(self, get, where: str) -> Writer:
        omit = self.omit
        if isinstance(get, self.const_type):
            return ConstJson(None if get.value is omit else dumps(get.value))

        def write(ctx):
            value = get(ctx)
            if value is omit:
                return None
            try:
                return dumps(value)
            except TypeError as exc:        # (a value JSON has no spelling for: a method...)
                raise ConfigError(f"{where}: {exc}") from None
        return write

    def _dict(self, node: dict, where: str) -> Writer:
        entries = [(_key(k), self.value(v, f"{where}.{k}")) for k, v in node.items()]
        # Runs of constant entries become one pre-joined chunk: `"a":1,"b":[]`.
        parts: list[bytes | tuple[bytes, Writer]] = []
        for prefix, writer in entries:
            if isinstance(writer, ConstJson):
                if writer.json is None:
                    continue
                chunk = prefix + writer.json
                if parts and isinstance(parts[-1], bytes):
                    parts[-1] += b"," + chunk
                else:
                    parts.append(chunk)
            else:
                parts.append((prefix, writer))
        if all(isinstance(p, bytes) for p in parts):
            return ConstJson(b"{" + b",".join(parts) + b"}")

        def write(ctx):
            out = []
            for part in parts:
                if part.__class__ is bytes:
                    out.append(part)
                else:
                    value = part[1](ctx)
                    if value is not None:
                        out.append(part[0] + value)
            return b"{" + b",".join(out) + b"}"
        return write

    def _list(self, node: list, where: str) -> Writer:
        items = [self.value(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if all(isinstance(w, ConstJson) for w in items):
            return ConstJson(b"[" + b",".join(w.json for w in items if w.json is not None) + b"]")

        def write(ctx):
            return b"[" + b",".join([v for v in (w(ctx) for w in items) if v is not None]) + b"]"
        return write

    def _object(self, node: dict, where: str) -> Writer:
        return self.compiler.embedding(node, where, self.objects)

    def _for(self, node: dict, where: str) -> Writer:
        if "$key" in node:
            entries = self.compiler.entries(node, where, self.value, None)
            return lambda ctx: orjson.dumps({key: orjson.Fragment(v) for key, v in entries(ctx)})
        items = self.compiler.items(node, where, self.value)
        return lambda ctx: b"[" + b",".join([v for v in items(ctx) if v is not None]) + b"]"

    def _if(self, node: dict, where: str) -> Writer:
        test = self.compiler.value(node["$if"], f"{where}.$if")
        then = self.value(node.get("$then"), f"{where}.$then")
        other = self.value(node["$else"], f"{where}.$else") if "$else" in node else ConstJson(None)
        return lambda ctx: then(ctx) if test(ctx) else other(ctx)
