"""A value written once per render (a template's `body`), generated as one Python value that
one `orjson.dumps` serialises.

Beside llmsim.render.jsoncodegen (joined JSON pieces, which pay off where pieces are
memoised and rendered again: a stream's events); why it is kept: docs/performance.md#what-is-kept-for-speed.
Invariant: the same bytes as the closure writer of
llmsim.render.jsonwriter (the differential test checks it); what it does not generate is
jsoncodegen's JSON, embedded as a Fragment. Errors go through jsoncodegen's `raise_failure`.
The story: docs/internals.md#renderjsonvaluegen.
"""
from __future__ import annotations

import ast
from typing import Any, NamedTuple

import orjson

from llmsim.render.jsonbytes import dumps
from llmsim.render.template_syntax import LOOP, node_kind

_SCALARS = (str, int, bool, type(None))


class Value(NamedTuple):
    """Code for one value: a Python expression giving it (OMIT when it is omitted, if
    `omittable`)."""
    code: str
    omittable: bool = False


class ValueCodegen:
    """The value-building side of a `JsonCodegen` (`cg`), whose expressions, inlining state
    and namespace it shares through `cg`'s public methods (`new_local`, `binding`, `holding`,
    `sealed`, `held_json`, `value_code`, ...), never its privates."""

    def __init__(self, cg):
        self.cg = cg
        omit = cg.omit
        cg.namespace.setdefault("_kept", lambda items: [item for item in items if item is not omit])
        self._kinds = {"string": self._leaf, "$if": self._if, "$for": self._for, "$object": self._object}

    def json_code(self, node: Any, where: str) -> str:
        """Code giving `node`'s JSON bytes (None when it is omitted)."""
        value = self.gen(node, where)
        if value.omittable:
            v = self._local()
            return f"(None if ({v} := {value.code}) is OMIT else _d({v}))"
        return f"_d({value.code})"

    def gen(self, node: Any, where: str) -> Value:
        if static(node):
            return Value(self._constant(node))
        kind = node_kind(node)
        if kind == "dict":
            return self._dict(node, where)
        if kind == "list":
            return self._list(node, where)
        generate = self._kinds.get(kind)
        if generate is None:
            return self._called(node, where)
        return self._sealed(node, where, generate)

    def _picks(self, node: dict) -> tuple[str, dict[str, str]] | None:
        """For an object named by `"prefix{{ dotted.name }}suffix"`: jsoncodegen's `picks`,
        less those not inlinable here or reading a variable that this code neither holds
        nor reads already (a pick's variable would be read for every value); None if none
        is left."""
        cg = self.cg
        found = None if self._inlinable(node["$object"]) else cg.picks(node["$object"])
        if found is None:
            return None
        dotted, picks = found
        extra, known = node.get("$with") or {}, cg.known() | set(cg.compiler.env.globals)   # (`given`, `omit`)
        kept = {}
        for part, obj in picks.items():
            free = cg.free_names({"$object": obj, "$with": extra})
            if self._inlinable(obj) and free is not None and free <= known:
                kept[part] = obj
        return (dotted, kept) if kept else None

    def _inlinable(self, name: Any) -> bool:
        return self.cg.inlinable(name)

    def _sealed(self, node: Any, where: str, generate) -> Value:
        """`node` generated here, if nothing in it reads the context as a whole (a closure,
        an object named by expression): that would miss the variables this code holds in
        locals (a loop's, `$with` ones). Otherwise llmsim.render.jsoncodegen's code for it, called
        with a context that holds them (`_called`)."""
        value = self.cg.sealed(lambda: generate(node, where))
        return self._called(node, where) if value is None else value

    def _called(self, node: Any, where: str) -> Value:
        """llmsim.render.jsoncodegen's JSON for `node`, as a Fragment in the value (`held_json`)."""
        return self._embedded(self.cg.held_json(node, where))

    # -- pieces -----------------------------------------------------------------------------
    def _local(self) -> str:
        return self.cg.new_local()

    def _constant(self, value: Any) -> str:
        """A literal for a scalar; for anything else (and floats, which may not be finite),
        a Fragment of its JSON made once."""
        if isinstance(value, _SCALARS):
            return repr(value)
        return self._fragment(dumps(value))

    def _fragment(self, data: bytes) -> str:
        name = self.cg.new_local("_k")
        self.cg.namespace[name] = orjson.Fragment(data)
        return name

    def _embedded(self, gen) -> Value:
        """jsoncodegen's JSON for `node`, as a Fragment in the value."""
        if gen.const is not None:
            return Value(self._fragment(gen.const))
        if gen.omittable:
            v = self._local()
            return Value(f"(OMIT if ({v} := {gen.code}) is None else _F({v}))", True)
        return Value(f"_F({gen.code})")

    def _leaf(self, text: str, where: str) -> Value:
        cg = self.cg
        whole = text.replace(" ", "")
        held = cg.binding(whole[2:-2]) if whole.startswith("{{") and whole.endswith("}}") else None
        if held is not None:
            local, is_json = held
            if is_json:                             # a `$with` value, already JSON
                cg.read(whole[2:-2])
                return Value(self._fragment(ast.literal_eval(local)) if local[0] == "b" else f"_F({local})")
        code = cg.value_code(text, where)
        if cg.may_omit(text) or code in cg.omittable_locals:
            return Value(code, True)
        echoed = echoed_with_default(code)
        if echoed is not None:              # usually absent: the default without `given`
            got, default = echoed
            if default == b"null":          # `.get(...)` gives None itself
                return Value(got)
            v = self._local()
            return Value(f"({self._constant(orjson.loads(default))} if ({v} := {got}) is None else {v})")
        return Value(code)

    def _dict(self, node: dict, where: str) -> Value:
        entries = []
        for key, value in node.items():
            gen = self.gen(value, f"{where}.{key}")
            if gen.omittable:
                v = self._local()
                entries.append(f"**({{{key!r}: {v}}} if ({v} := {gen.code}) is not OMIT else {{}})")
            else:
                entries.append(f"{key!r}: {gen.code}")
        return Value("{" + ", ".join(entries) + "}")

    def _list(self, node: list, where: str) -> Value:
        items = [self.gen(value, f"{where}[{i}]") for i, value in enumerate(node)]
        if any(item.omittable for item in items):     # (no comprehension: items may hold `:=`)
            return Value(f"_kept(({', '.join(i.code for i in items)},))")
        return Value(f"[{', '.join(i.code for i in items)}]")

    def _if(self, node: dict, where: str) -> Value:
        test = self.cg.value_code(node["$if"], f"{where}.$if")
        then = self.gen(node.get("$then"), f"{where}.$then")
        other = self.gen(node["$else"], f"{where}.$else") if "$else" in node else Value("OMIT", True)
        return Value(f"({then.code} if {test} else {other.code})", then.omittable or other.omittable)

    def _for(self, node: dict, where: str) -> Value:
        """A list display over the loop's source, its items (those not omitted) in place (with
        `$key`, a dict display)."""
        cg = self.cg
        var, _ = cg.compiler.loop(node["$for"], f"{where}.$for")      # checks the spelling
        source = cg.value_code("{{" + LOOP.match(node["$for"]).group(2) + "}}", f"{where}.$for")
        item = self._local()
        with cg.holding(var, item):
            body = self.gen(node.get("$do"), f"{where}.$do")
            key = cg.value_code(node["$key"], f"{where}.$key") if "$key" in node else None
        # an empty list (most requests' tools) is written without running a comprehension
        held = self._local()
        if key is not None:     # a mapping: a dict display (no key rendered for an omitted value)
            if body.omittable:
                v = self._local()
                code = f"{{_entry_key({key}): {v} for {item} in {held} if ({v} := {body.code}) is not OMIT}}"
            else:
                code = f"{{_entry_key({key}): {body.code} for {item} in {held}}}"
            return Value(f"({{}} if ({held} := {source}).__class__ is list and not {held} else {code})")
        if body.omittable:
            v = self._local()
            code = f"[{v} for {item} in {held} if ({v} := {body.code}) is not OMIT]"
        else:
            code = f"[{body.code} for {item} in {held}]"
        return Value(f"([] if ({held} := {source}).__class__ is list and not {held} else {code})")

    def _object(self, node: dict, where: str) -> Value:
        """The object's value in place, each `$with` value computed first into a local (as
        JSON bytes when the object only writes it out whole). An object named by
        `"prefix{{ dotted.name }}suffix"`: each object the name can pick in place, chosen by
        the value (a Responses output item's `kind`: no call and no context copied per
        item), and any other value written by jsoncodegen's code (its error, if none)."""
        cg = self.cg
        name = node["$object"]
        found = self._picks(node)
        if found is not None:
            dotted, picks = found
            value = cg.value_code("{{" + dotted + "}}", f"{where}.$object")
            v = self._local()
            branches, omittable = [], False
            for i, (part, obj) in enumerate(picks.items()):
                picked = self._object({**node, "$object": obj}, where)
                test = f"({v} := {value}) == {part!r}" if i == 0 else f"{v} == {part!r}"
                branches.append(f"{picked.code} if {test} else ")
                omittable |= picked.omittable
            other = self._called(node, where)
            return Value(f"({''.join(branches)}{other.code})", omittable or other.omittable)
        if not self._inlinable(name):
            return self._called(node, where)
        binds, subst = cg.with_binds(name, node.get("$with") or {}, where)
        with cg.inlining(name, subst):
            value = self.gen(cg.raw_objects[name], f"objects.{name}")
        if not binds:
            return value
        return Value(f"({', '.join(binds)}, {value.code})[-1]", value.omittable)


def static(node: Any) -> bool:
    """True for a value without expressions or directives: its JSON is fixed."""
    if isinstance(node, str):
        return "{{" not in node and "{%" not in node
    if isinstance(node, list):
        return all(static(v) for v in node)
    if isinstance(node, dict):
        return not any(isinstance(k, str) and k.startswith("$") for k in node) and \
            all(static(v) for v in node.values())
    return True


def echoed_with_default(code: str) -> tuple[str, bytes] | None:
    """For `given(m.get(k), <literal>)` (a request field echoed back, usually absent): the code
    of `m.get(k)` and the JSON of the literal. `m.get(k)` is never jinja's Undefined, so
    `given` then only stands for `is None`."""
    try:
        call = ast.parse(code, mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "given"
            and len(call.args) == 2 and not call.keywords):
        return None
    got, default = call.args
    if not (isinstance(got, ast.Call) and isinstance(got.func, ast.Attribute) and got.func.attr == "get"):
        return None
    try:
        value = ast.literal_eval(default)
    except ValueError:
        return None
    return ast.unparse(got), dumps(value)
