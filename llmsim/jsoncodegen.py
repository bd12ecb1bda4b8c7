"""Template values compiled to Python source: one function per value, writing its JSON bytes.

A streamed event costs what its template costs to evaluate, so the hot templates are turned
into straight-line code at start-up, the way jinja2 compiles its templates:

    {kind: greeting, n: "{{ seq }}", text: "{{ token.text }}"}

becomes (roughly)

    def write(ctx):
        _n_seq, _n_token = _name(ctx, 'seq'), _name(ctx, 'token')
        return b"".join((b'{"kind":"greeting","n":', _d(_n_seq), b',"text":',
                         _d(_n_token.text), b'}'))

Constant sub-trees are serialised once; expressions are inlined (dotted names as item/attribute
look-ups, simple expressions as pyexpr's Python); `omit`-able values are filtered where they
can occur. The generated function is only a fast path: on any exception it hands the value to
the closure writer of `jsonwriter`, which gives the same bytes or the precise template error.
"""
from __future__ import annotations

import itertools
import re
from typing import Any, Callable, NamedTuple

import orjson

from llmsim import pyexpr
from llmsim.jsonbytes import dumps
from llmsim.template_syntax import LOOP, ONE_NAME, node_kind

Writer = Callable[[dict], "bytes | None"]


class Gen(NamedTuple):
    """Generated code for one value: a Python expression giving its JSON bytes (None when the
    value is omitted), or `const`, the bytes of a value without expressions."""
    code: str
    const: bytes | None = None
    omittable: bool = False


def _const(data: bytes) -> Gen:
    return Gen(repr(data), data)


def _get(obj: Any, name: str) -> Any:
    """A dotted name's step, as `templates._getter` does it: a dict's item, else the attribute."""
    return obj[name] if obj.__class__ is dict else getattr(obj, name)


def _commas(parts) -> bytes:
    return b",".join([p for p in parts if p is not None])


def _concat(parts: list) -> str:
    """Code joining `parts` (bytes literals and code strings), adjacent literals merged."""
    merged: list = []
    for part in parts:
        if isinstance(part, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += part
        else:
            merged.append(part)
    code = [repr(p) if isinstance(p, bytes) else p for p in merged]
    return code[0] if len(code) == 1 else f'b"".join(({", ".join(code)},))'


class JsonCodegen:
    """Generates the fast writer of a template value; `compiler` is `templates.Compiler`."""

    def __init__(self, compiler, omit, raw_objects: dict[str, Any]):
        self.compiler = compiler
        self.omit = omit
        self.raw_objects = raw_objects            # object name -> its YAML (for `omit`-ability)
        self.objects: dict[str, Writer] = {}     # object name -> its writer (filled by the caller)
        self._ids = itertools.count()
        self.namespace = {"_d": orjson.dumps, "_F": orjson.Fragment, "_g": _get, "_commas": _commas, "_objs": self.objects,
                          "_attr": pyexpr._attr, "_name": pyexpr._name, "OMIT": omit,
                          **pyexpr.TEST_FUNCTIONS, **compiler.env.globals}
        self._names: set[str] = set()             # variables the function being generated reads
        self._reads: list[set[str]] = []          # ... and each dict entry being generated reads
        self._memo_ids = itertools.count()
        self.bound: set[str] = {"seq"}            # variables templates (re)bind: never memoised
        self._kinds = {"string": self._leaf, "list": self._list, "$object": self._object,
                       "$for": self._for, "$if": self._if, "dict": self._dict,
                       "const": lambda node, where: _const(dumps(node))}

    def writer(self, node: Any, where: str, fallback: Writer) -> Writer:
        """`node`'s JSON writer: generated code, with `fallback` when it raises."""
        gen, names = self._scoped(node, where)
        if gen.const is not None:
            data = gen.const
            return lambda ctx: data
        fast = self._define(gen.code, names)

        def write(ctx):
            try:
                return fast(ctx)
            except Exception:       # the closure writer answers, or names the template error
                return fallback(ctx)
        return write

    def value_function(self, node: Any, where: str, fallback: Callable[[dict], Any]) -> Callable[[dict], Any]:
        """`node`'s value (a step's time or test, a loop's items) by generated code, with
        `fallback` (the closure) when it raises."""
        outer, self._names = self._names, set()
        try:
            code, names = self.value_code(node, where), self._names
        finally:
            self._names = outer
        fast = self._define(code, names)

        def value(ctx):
            try:
                return fast(ctx)
            except Exception:
                return fallback(ctx)
        return value

    def _scoped(self, node: Any, where: str) -> tuple[Gen, set[str]]:
        """Generate `node` as the body of a new function: its code and the variables it reads."""
        outer, self._names = self._names, set()
        try:
            return self.gen(node, where), self._names
        finally:
            self._names = outer

    def _read(self, name: str) -> None:
        self._names.add(name)
        for reads in self._reads:
            reads.add(name)

    def _define(self, code: str, names: set[str]) -> Callable[[dict], Any]:
        """A function of ctx returning `code`; each variable read once, into a local."""
        name = f"_w{next(self._ids)}"
        lines = [f"def {name}(ctx):"]
        if "_m[" in code:
            lines.append("    _m = ctx['__memo']")
        lines += [f"    _n_{var} = _name(ctx, {var!r})" for var in sorted(names)]
        lines.append(f"    return {code}")
        exec(compile("\n".join(lines) + "\n", f"<template {name}>", "exec"),
             self.namespace)  # noqa: S102 - our own generated code
        return self.namespace[name]

    def _callable(self, f: Callable) -> str:
        name = f"_c{next(self._ids)}"
        self.namespace[name] = f
        return name

    # -- values (Python objects), for tests, names, loop sources and $with ------------------
    def value_code(self, node: Any, where: str) -> str:
        if isinstance(node, str):
            whole = node.strip()
            if whole.startswith("{{") and whole.endswith("}}") and "{{" not in whole[2:-2]:
                source = whole[2:-2].strip()
                if self._dotted(source):
                    head, *rest = source.split(".")
                    self._read(head)
                    code = f"_n_{head}"
                    if rest:        # the first step inline: a dict's item, else the attribute
                        code = f"({code}[{rest[0]!r}] if {code}.__class__ is dict else {code}.{rest[0]})"
                    for name in rest[1:]:
                        code = f"_g({code}, {name!r})"
                    return code
                native = pyexpr.python_source(source, set(self.compiler.env.globals))
                if native is not None:
                    for name in native[1]:
                        self._read(name)
                    return f"({native[0]})"
            elif "{{" not in node and "{%" not in node:
                return repr(node)
            else:
                one = ONE_NAME.match(node)          # "prefix{{ dotted.name }}suffix"
                if one and self._dotted(one.group(2)):
                    inner = self.value_code("{{" + one.group(2) + "}}", where)
                    return f"({one.group(1)!r} + format({inner}) + {one.group(3)!r})"
        if node is None or isinstance(node, (bool, int, float)):
            return repr(node)
        for reads in self._reads:           # a closure: what it reads is not known here
            reads.add("__opaque__")
        return f"{self._callable(self.compiler.value(node, where))}(ctx)"

    @staticmethod
    def _dotted(source: str) -> bool:
        return all(part.isidentifier() for part in source.split(".")) and source not in (
            "omit", "none", "None", "true", "false")

    # -- JSON bytes -------------------------------------------------------------------------
    def gen(self, node: Any, where: str) -> Gen:
        return self._kinds[node_kind(node)](node, where)

    def _list(self, node: list, where: str) -> Gen:
        return self._sequence([self.gen(v, f"{where}[{i}]") for i, v in enumerate(node)])

    def _leaf(self, text: str, where: str) -> Gen:
        if "{{" not in text and "{%" not in text:
            return _const(dumps(text))
        code = self.value_code(text, where)
        if not self._may_omit(text):
            return Gen(f"_d({code})")
        v = f"_v{next(self._ids)}"
        return Gen(f"(None if ({v} := {code}) is OMIT else _d({v}))", omittable=True)

    @staticmethod
    def _may_omit(text: str) -> bool:
        return "omit" in text

    def _entry(self, node: Any, where: str) -> tuple[Gen, bool]:
        """A dict entry's code, and whether it may be memoised: it reads only variables that
        no template rebinds (the ones a template is rendered with: plan, req, ...), so it has
        one value per render, and it embeds no object (whose reads are not tracked)."""
        reads: set[str] = set()
        self._reads.append(reads)
        try:
            gen = self.gen(node, where)
        finally:
            self._reads.pop()
        if gen.const is not None:
            return gen, True
        stable = not gen.omittable and not (reads & self.bound) and "_objs[" not in gen.code \
            and "__opaque__" not in reads
        return gen, stable

    def _memoised(self, entries: list) -> list:
        """Runs of memoisable entries -> one entry each whose code is looked up in the render's
        memo (`ctx['__memo']`, one dict per `Template.events` / `body_json` call)."""
        out, run = [], []

        def close_run():
            if any(g.const is None for _, g, _ in run):
                key = next(self._memo_ids)
                parts: list = []
                for i, (prefix, g, _) in enumerate(run):
                    parts += [b"," + prefix if i else prefix, g.const if g.const is not None else g.code]
                code = f"(_m[{key}] if {key} in _m else _m.setdefault({key}, {_concat(parts)}))"
                out.append((b"", Gen(code), False))
            else:
                out.extend(run)
            run.clear()
        for entry in entries:
            if entry[2]:
                run.append(entry)
            else:
                close_run()
                out.append(entry)
        close_run()
        return [(prefix, g) for prefix, g, _ in out]

    def _dict(self, node: dict, where: str) -> Gen:
        entries = [(dumps({k: 0})[1:-2], *self._entry(v, f"{where}.{k}")) for k, v in node.items()]
        if all(g.const is not None for _, g, _ in entries):
            return _const(b"{" + b",".join(p + g.const for p, g, _ in entries) + b"}")
        entries = self._memoised(entries)
        if not any(g.omittable for _, g in entries):
            parts: list = [b"{"]
            for i, (prefix, g) in enumerate(entries):
                parts += [b"," + prefix if i else prefix, g.const if g.const is not None else g.code]
            return Gen(_concat([*parts, b"}"]))
        # Some entries may vanish: runs of fixed entries, and each optional one, joined by commas.
        elements, run = [], []
        for prefix, g in entries:
            if g.omittable:
                if run:
                    elements.append(_concat(run))
                    run = []
                v = f"_v{next(self._ids)}"
                elements.append(f"(None if ({v} := {g.code}) is None else {prefix!r} + {v})")
            else:
                run += [b"," if run else b"", prefix, g.const if g.const is not None else g.code]
        if run:
            elements.append(_concat(run))
        return Gen(f'b"{{" + _commas(({", ".join(elements)},)) + b"}}"')

    def _sequence(self, items: list[Gen]) -> Gen:
        if all(g.const is not None for g in items):
            return _const(b"[" + b",".join(g.const for g in items) + b"]")
        if any(g.omittable for g in items):
            return Gen(f'b"[" + _commas(({", ".join(g.code for g in items)},)) + b"]"')
        parts: list = [b"["]
        for i, g in enumerate(items):
            parts += [b"," if i else b"", g.const if g.const is not None else g.code]
        return Gen(_concat([*parts, b"]"]))

    def _object(self, node: dict, where: str) -> Gen:
        name = node["$object"]
        fixed = isinstance(name, str) and "{{" not in name
        name_code = repr(name) if fixed else self.value_code(name, f"{where}.$object")
        ctx = "ctx"
        extra = node.get("$with") or {}
        if extra:
            items = ", ".join(f"{k!r}: {self._with_code(name if fixed else None, k, v, f'{where}.$with.{k}')}"
                              for k, v in extra.items())
            ctx = f"{{**ctx, {items}}}"
        omittable = not fixed or self._object_may_omit(name, set())
        return Gen(f"_objs[{name_code}]({ctx})", omittable=omittable)

    def _with_code(self, target: str | None, var: str, node: Any, where: str) -> str:
        """A `$with` value. A list or mapping the target object only writes out whole
        (`"{{ var }}"`) is passed already serialised (an orjson Fragment), not built and
        serialised again."""
        if isinstance(node, (list, dict)) and target is not None and \
                self._used_whole(self.raw_objects.get(target), var, set()):
            gen = self.gen(node, where)
            if not gen.omittable:
                return f"_F({gen.code})"
        return self.value_code(node, where)

    def _used_whole(self, node: Any, var: str, seen: set) -> bool:
        """True when every use of `var` in `node` (and the objects it embeds) is a value
        `"{{ var }}"`: never a test, a loop source, an object name or part of an expression."""
        mentions = re.compile(rf"\b{re.escape(var)}\b").search
        if isinstance(node, str):
            whole = node.strip()
            return whole.replace(" ", "") == "{{" + var + "}}" or not ("{" in node and mentions(node))
        if isinstance(node, list):
            return all(self._used_whole(v, var, seen) for v in node)
        if not isinstance(node, dict):
            return True
        if "$object" in node:
            name, extra = node["$object"], node.get("$with") or {}
            if not isinstance(name, str) or "{" in name or any(mentions(str(v)) for v in extra.values()):
                return False
            return name in seen or self._used_whole(self.raw_objects.get(name), var, seen | {name})
        if "$for" in node:
            return not mentions(str(node["$for"])) and self._used_whole(node.get("$do"), var, seen)
        if "$if" in node:
            return not mentions(str(node["$if"])) and all(
                self._used_whole(node.get(k), var, seen) for k in ("$then", "$else"))
        return all(self._used_whole(v, var, seen) for v in node.values())

    def _object_may_omit(self, name: str, seen: set) -> bool:
        if name in seen:
            return True
        node = self.raw_objects.get(name)
        if isinstance(node, str):
            return self._may_omit(node)
        if isinstance(node, dict):
            if "$object" in node:
                inner = node["$object"]
                return not (isinstance(inner, str) and "{{" not in inner) or \
                    self._object_may_omit(inner, seen | {name})
            if "$if" in node:
                return True
        return False

    def _for(self, node: dict, where: str) -> Gen:
        var, _ = self.compiler.loop(node["$for"], f"{where}.$for")      # checks the spelling
        source = self.value_code("{{" + LOOP.match(node["$for"]).group(2) + "}}", f"{where}.$for")
        body, names = self._scoped(node.get("$do"), f"{where}.$do")
        if body.const is not None:
            return Gen(f'b"[" + b",".join([{body.code} for _ in {source}]) + b"]"')
        item = self._define(body.code, names)
        name = self._callable(item)
        return Gen(f'b"[" + _commas([{name}({{**ctx, {var!r}: _it}}) for _it in {source}]) + b"]"')

    def _if(self, node: dict, where: str) -> Gen:
        test = self.value_code(node["$if"], f"{where}.$if")
        then = self.gen(node.get("$then"), f"{where}.$then")
        other = self.gen(node["$else"], f"{where}.$else") if "$else" in node else Gen("None", omittable=True)
        return Gen(f"({then.code} if {test} else {other.code})",
                   omittable=then.omittable or other.omittable)
