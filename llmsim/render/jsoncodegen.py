"""Template values compiled to Python source: one function per value, writing its JSON bytes.

The hot templates (a stream's events) become straight-line code at start-up, as jinja2
compiles its templates: constant sub-trees serialised once, what one render gives one value
computed once per render (the `_m` memo), expressions inlined, objects with a fixed name
inlined. Invariant: a generated function gives the same bytes as the closure writer of
llmsim.render.jsonwriter (the differential test, tests/test_template_expressions.py, checks
it). When it raises, the closure only names the template error (`raise_failure`): logged with its
template and path, answered as a server error. The story: docs/internals.md#renderjsoncodegen.
"""
from __future__ import annotations

import itertools
import logging
import re
from ast import literal_eval
from contextlib import contextmanager
from functools import cache
from typing import Any, Callable, NamedTuple, NoReturn

import orjson
import jinja2
from jinja2 import meta

from llmsim.errors import APIError, ConfigError, ServerError
from llmsim.render import pyexpr
from llmsim.render.jsonbytes import SMALL_INTS, dumps
from llmsim.render.jsonvaluegen import ValueCodegen, echoed_with_default, static
from llmsim.render.reuse import reuse
from llmsim.render.template_syntax import LOOP, ONE_NAME, entry_key, free_names, node_kind

Writer = Callable[[dict], "bytes | None"]
log = logging.getLogger("llmsim.templates")


def raise_failure(where: str, error: Exception, reference: Callable[[dict], Any], ctx: dict) -> NoReturn:
    """The generated code of the value at `where` raised `error`: an APIError raised on purpose
    passes; else the value has a template error, which the closure (the reference renderer,
    the same language and lookup rule) renders again only to name it, logged with its template
    and path, and answered as a server error (a template bug is the server's). Its value is
    never used: should the closure give one, the two disagree (a compiler bug, which the
    differential test tests/test_template_expressions.py looks for), logged as such."""
    if isinstance(error, APIError):
        raise error
    try:
        reference(ctx)
    except APIError:
        raise
    except Exception as exc:
        log.error("%s", exc if isinstance(exc, ConfigError) else f"{where}: {type(exc).__name__}: {exc}")
        raise ServerError.unexpected() from exc
    log.error("%s: generated code raised %s: %s, where the reference renderer gives a value "
              "(a template compiler bug)", where, type(error).__name__, error)
    raise ServerError.unexpected() from error


BIG_INT = "Integer exceeds 64-bit range"      # orjson's TypeError for an int JSON allows, 64 bits do not


class Gen(NamedTuple):
    """Generated code for one value: a Python expression giving its JSON bytes (None when the
    value is omitted), or `const`, the bytes of a value without expressions."""
    code: str
    const: bytes | None = None
    omittable: bool = False
    parts: tuple = ()       # when `code` joins these (bytes and code): a parent joins them itself
    choice: tuple = ()      # when `code` is `gens[0].code if tests[0] else ... else other`:
                            # (tests, gens, other); a parent's join goes into each branch


MAX_CHOICE_CODE = 40_000    # characters: a join is put into a choice's branches up to this


def _const(data: bytes) -> Gen:
    return Gen(repr(data), data)


def _commas(parts) -> bytes:
    """The parts that are not None (omitted), comma-separated. Parts are JSON members or
    values, never empty bytes, so `filter(None, ...)` drops exactly the omitted ones."""
    return b",".join(filter(None, parts))


def _joined(parts: list) -> Gen:
    """Code joining `parts` (bytes literals, code strings, and Gens: a join's parts are taken
    into this one), adjacent literals merged. A part that chooses between values (an
    `$object` named by expression, an `$if`) takes the join into each of its branches, so
    that a chat chunk is one join (its object, its choices list, the choice picked by its
    kind, and the SSE frame around it) rather than one per level."""
    choices = [i for i, part in enumerate(parts) if isinstance(part, Gen) and part.choice]
    if len(choices) == 1 and len(parts) > 1:
        distributed = _distributed(parts, choices[0])
        if distributed is not None:
            return distributed
    merged: list = []
    for part in parts:
        for piece in (part.parts or (part.code,)) if isinstance(part, Gen) else (part,):
            if isinstance(piece, bytes) and merged and isinstance(merged[-1], bytes):
                merged[-1] += piece
            else:
                merged.append(piece)
    code = [repr(p) if isinstance(p, bytes) else p for p in merged]
    if len(code) == 1:
        return Gen(code[0])
    return Gen(f'b"".join(({", ".join(code)},))', parts=tuple(merged))


def _chosen(tests: tuple, gens: tuple, other: str, omittable: bool = False) -> Gen:
    """`gens[0] if tests[0] else ... else other`, with its branches kept (`Gen.choice`) unless
    it may be omitted."""
    code = "(" + "".join(f"{gen.code} if {test} else " for test, gen in zip(tests, gens)) + other + ")"
    return Gen(code, omittable=omittable, choice=() if omittable else (tests, gens, other))


def _distributed(parts: list, at: int) -> Gen | None:
    """`parts` joined inside each branch of the choice `parts[at]`; None when that code grows
    past `MAX_CHOICE_CODE` (choices within choices)."""
    tests, gens, other = parts[at].choice
    before, after = parts[:at], parts[at + 1:]
    branches = tuple(_joined([*before, gen if gen.const is None else gen.const, *after]) for gen in gens)
    chosen = _chosen(tests, branches, _joined([*before, Gen(other), *after]).code)
    return chosen if len(chosen.code) <= MAX_CHOICE_CODE else None


def _concat(parts: list) -> str:
    return _joined(parts).code


# a value `{{ seq }}` or `{{ ...index }}` (an event's sequence number, a loop's index, an
# item's): written from a table of small ints, cheaper than a call of orjson
_COUNTER = re.compile(r"^\{\{\s*(?:[A-Za-z_]\w*\.)*(?:seq|\w*index)\s*\}\}$")
LOOP_RUN = re.compile(r"\b_lr\d+\b")     # a local holding what one run of a step loop computes once


def loop_runs(code: str) -> list[str]:
    """The loop-run locals (`_lrN`) `code` reads, each once, in order."""
    return list(dict.fromkeys(LOOP_RUN.findall(code)))


LOCAL = "@"     # marks a read of a variable the writer binds itself (a `$for`'s, a `$with`'s)


class _Without:
    """An entry's read set, seen from inside a loop of that entry: the loop variable is the
    loop's own, not a read of the entry's."""
    __slots__ = ("reads", "name")

    def __init__(self, reads, name: str):
        self.reads, self.name = reads, LOCAL + name

    def add(self, name: str) -> None:
        if name != self.name:
            self.reads.add(name)


class JsonCodegen:
    """Generates the fast writer of a template value; `compiler` is `templates.Compiler`."""

    MAX_PICKS = 12      # objects an `$object` named by expression may pick, to be inlined
    GUARDED = True      # False: a writer raises what its code raises, unlogged (tests: the
                        # generated code must give every byte by itself)

    def __init__(self, compiler, omit, raw_objects: dict[str, Any]):
        self.compiler = compiler
        self.omit = omit
        self.raw_objects = raw_objects            # object name -> its YAML (for `omit`-ability)
        # object name -> its generated writer, unguarded: called from another writer, whose
        # guard answers for both (filled by `writer(..., name=)`)
        self.fast: dict[str, Writer] = {}
        self._ids = itertools.count()
        self.namespace = {"_d": orjson.dumps, "_D": SMALL_INTS, "_F": orjson.Fragment, "_commas": _commas, "_fast": self.fast,
                          "_entry_key": entry_key,
                          "_attr": pyexpr._attr, "_item": pyexpr._item, "_name": pyexpr._name, "OMIT": omit,
                          **pyexpr.TEST_FUNCTIONS, **pyexpr.INLINE_GLOBALS, **compiler.env.globals}
        self._names: set[str] = set()             # variables the function being generated reads
        self._reads: list = []                    # ... and each dict entry being generated reads
        self._memo_ids = itertools.count()
        self.bound: set[str] = {"seq"}            # variables templates (re)bind: never memoised
        self._loop_fixed: frozenset[str] = frozenset()  # ... but these, per run of a step loop (`writer`)
        self._memo = True                         # memoise what can be (`writer`'s `once`)
        # variables whose value may change between the events of one render (loops'), and
        # whether an object's own writer is being generated (its context may hold any `$with`)
        self.varying: set[str] = {"seq"}
        self._in_object = False
        self._call_keys: dict[tuple, int] = {}    # (object, its constant `$with`) -> memo key
        self._local_loops: list[str] = []         # variables of the `$for`s being generated
        # while an object is inlined: its `$with` variables -> (the local holding the value,
        # whether it holds the value's JSON bytes rather than the value)
        self._subst: dict[str, tuple[str | Gen, bool]] = {}
        self._inlining: set[str] = set()          # objects being inlined (no recursion)
        self.omittable_locals: set[str] = set()   # `$with` values bound to locals that may be omit
        self._kinds = {"string": self._leaf, "list": self._list, "$object": self._object,
                       "$for": self._for, "$if": self._if, "dict": self._dict,
                       "const": lambda node, where: _const(dumps(node))}

    def writer(self, node: Any, where: str, reference: Writer, name: str | None = None,
               once: bool = False, loop_fixed: frozenset[str] = frozenset()) -> Writer:
        """`node`'s JSON writer: generated code, guarded by `raise_failure` (with `reference`, the
        closure writer, to name the error) when it raises; the writer
        of the object `name`, when given, which other writers may call.
        `once`: the value is written once per render (a template's `body`), so nothing of it
        is memoised (a memo costs a look-up and a store per entry, and saves nothing).
        `loop_fixed`: for an event inside a stream's loop, the variables of outer loops, which
        keep their values while that loop runs: what reads only them (and the render's
        variables) is computed once per run of the loop, into a local (`LOOP_RUN`)."""
        outer = self._memo, self._in_object, self._loop_fixed
        self._memo, self._loop_fixed = not once, frozenset(loop_fixed)
        self._in_object = name is not None
        try:
            if once and not static(node):       # built as one value, serialised once
                gen, names = self._scoped(node, where, values=True)
            else:
                gen, names = self._scoped(node, where)
        finally:
            self._memo, self._in_object, self._loop_fixed = outer
        if gen.const is not None:
            data = gen.const
            fast = lambda ctx: data         # noqa: E731
        else:
            fast = self._define(gen.code, names)
            if not gen.omittable:       # for an SSE stream: the frame around it, in the same join
                fast.framed = lambda head, end, ctx, given=None, whole=None: self._body_lines(
                    _joined([head, gen, end]).code, names, ctx, given or {}, whole)
        if name is not None:
            self.fast[name] = fast
        if gen.const is not None or not self.GUARDED:
            return fast

        def write(ctx):
            try:
                return fast(ctx)
            except TypeError as exc:       # orjson's limit, not a template's: an integer beyond
                if BIG_INT not in str(exc):     # 64 bits (a request's, echoed) is Python's json's
                    raise_failure(where, exc, reference, ctx)
                return reference(ctx)
            except Exception as exc:       # a template error, logged and raised (`raise_failure`)
                raise_failure(where, exc, reference, ctx)
        write.fast = fast           # for generated code that catches the exception itself
        return write

    def value_function(self, node: Any, where: str, reference: Callable[[dict], Any]) -> Callable[[dict], Any]:
        """`node`'s value (a step's time or test, a loop's items) by generated code, guarded
        by `raise_failure` (with `reference`, the closure) when it raises."""
        outer, self._names = self._names, set()
        try:
            code, names = self.value_code(node, where), self._names
        finally:
            self._names = outer
        fast = self._define(code, names)

        def value(ctx):
            try:
                return fast(ctx)
            except Exception as exc:
                raise_failure(where, exc, reference, ctx)
        value.fast = fast
        return value

    def dotted_code(self, node: Any) -> tuple[str, set[str]] | None:
        """For a `{{ dotted.name }}` node, code reading its value from locals `_n_<variable>`
        (each step a dict's item, else the attribute) and the variables it reads; else None."""
        whole = node.strip() if isinstance(node, str) else ""
        if not (whole.startswith("{{") and whole.endswith("}}") and self._dotted(whole[2:-2].strip())):
            return None
        outer, self._names = self._names, set()
        try:
            return self.value_code(whole, "dotted"), self._names
        finally:
            self._names = outer

    def _scoped(self, node: Any, where: str, values: bool = False) -> tuple[Gen, set[str]]:
        """Generate `node` as the body of a new function: its code and the variables it reads;
        with `values`, by llmsim.render.jsonvaluegen."""
        outer, self._names = self._names, set()
        try:
            if values:
                return Gen(ValueCodegen(self).json_code(node, where)), self._names
            return self.gen(node, where), self._names
        finally:
            self._names = outer

    def _var(self, name: str) -> str:
        """Code reading variable `name`: the local it was read into, or the `$with` binding
        of the object being inlined."""
        bound = self._subst.get(name)
        read = LOCAL + name if bound is not None or name in self._local_loops else name
        for reads in self._reads:
            reads.add(read)
        if bound is None:
            self._names.add(name)
            return f"_n_{name}"
        local, is_json = bound
        if isinstance(local, Gen):
            local = local.code
        return f"_F({local})" if is_json else local     # JSON bytes: the value orjson writes

    def _define(self, code: str, names: set[str]) -> Callable[[dict], Any]:
        """A function of ctx returning `code`; each variable read once, into a local: straight
        from the dict (no call per variable, of which a Responses stream reads hundreds), and through
        `_name` (strict Undefined for a missing one) only when one is missing. A variable read
        as `given(name, default)` is often missing, so it is looked up first (no exception),
        and a missing one is an Undefined made once (`_u_name`), not one per render."""
        name = f"_w{next(self._ids)}"
        lines = [f"def {name}(ctx):"]
        if re.search(r"\b_m\[", code):
            lines.append("    _m = ctx['__memo']")
        lines += [f"    {local} = None" for local in loop_runs(code)]     # (called alone: no loop's run)
        optional = {var for var in names if f"given(_n_{var}," in code}    # often missing
        for var in sorted(optional):
            self.namespace.setdefault(f"_u_{var}", pyexpr._name({}, var))
            lines.append(f"    _n_{var} = ctx[{var!r}] if {var!r} in ctx else _u_{var}")
        if required := sorted(names - optional):
            lines += ["    try:", *(f"        _n_{var} = ctx[{var!r}]" for var in required),
                      "    except KeyError:", *(f"        _n_{var} = _name(ctx, {var!r})" for var in required)]
        lines.append(f"    return {reuse(pyexpr.inline_given(code))}")
        exec(compile("\n".join(lines) + "\n", f"<template {name}>", "exec"),
             self.namespace)  # noqa: S102 - our own generated code
        function = self.namespace[name]
        function.inline = lambda ctx, given=None, whole=None: self._body_lines(code, names, ctx,
                                                                               given or {}, whole)
        return function

    def _body_lines(self, code: str, names: set[str], ctx: str, given: dict[str, str],
                    whole: str | None = None) -> list[str]:
        """The statements of `_define`'s function body, for generated code in this module's
        namespace (llmsim.render.stepcodegen) whose context is the local `ctx`, raising where that
        function would not (a missing variable: KeyError; the caller's `except` then calls
        that function, which reads it as Undefined); `given`: variables (and the
        memos, by their context keys) already in locals (name -> local), read from there
        (a local's name in place); a variable of the context is read where first used on
        each path (llmsim.render.reuse), so a memo's hit reads none;
        `whole`: the code for the context where it is used whole (passed to an object's
        writer), if not `ctx` itself."""
        lines = []
        if re.search(r"\b_m\[", code):
            held = given.get("__memo")
            if held is None:
                lines.append(f"_m = {ctx}['__memo']")
            elif held != "_m":
                lines.append(f"_m = {held}")
        aliases, reads = {}, {}      # a variable held in a local: read from there in place
        for var in sorted(names):
            if var in given and given[var].isidentifier():
                aliases[f"_n_{var}"] = given[var]
            elif var in given:
                lines.append(f"_n_{var} = {given[var]}")
            elif f"given(_n_{var}," in code:
                self.namespace.setdefault(f"_u_{var}", pyexpr._name({}, var))
                lines.append(f"_n_{var} = {ctx}[{var!r}] if {var!r} in {ctx} else _u_{var}")
            else:       # read where first used on each path (`reuse`): a memo's hit reads none
                reads[f"_n_{var}"] = f"{ctx}[{var!r}]"
        code = pyexpr.inline_given(pyexpr.renamed(code, aliases) if aliases else code)
        whole = whole or ctx
        if whole != "ctx" and re.search(r"\bctx\b", code):     # (e.g. calls of objects' writers)
            code = pyexpr.renamed(code, {"ctx": whole})
        code = reuse(pyexpr.renamed(code, reads) if reads else code)
        return lines + [code]

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
                    code = self._var(head)
                    for name in rest:       # each step a dict's item, else the attribute
                        if not code.isidentifier():
                            v = f"_v{next(self._ids)}"
                            code, held = f"({v} := {code})", v
                        else:
                            held = code
                        code = f"({held}[{name!r}] if {code}.__class__ is dict else {held}.{name})"
                    return code
                native = pyexpr.python_source(source, set(self.compiler.env.globals))
                if native is not None:
                    code, spliced = native[0], False
                    for name in native[1]:
                        read = self._var(name)
                        if read != f"_n_{name}":        # a `$with` variable of an inlined object
                            code = re.sub(rf"\b_n_{name}\b", lambda _, read=read: read, code)
                            spliced |= not read.isidentifier()
                    return f"({pyexpr.fold_constant_tests(code) if spliced else code})"
            elif "{{" not in node and "{%" not in node:
                return repr(node)
            else:
                parts = self._name_parts(node)      # "prefix{{ dotted.name }}suffix"
                if parts is not None:
                    prefix, dotted, suffix = parts
                    inner = self.value_code("{{" + dotted + "}}", where)
                    return f"({prefix!r} + format({inner}) + {suffix!r})"
        if node is None or isinstance(node, (bool, int, float)):
            return repr(node)
        for reads in self._reads:           # a closure: what it reads is not known here
            reads.add("__opaque__")
        return f"{self._callable(self.compiler.value(node, where))}(ctx)"

    @staticmethod
    def _dotted(source: str) -> bool:
        """A name, or names joined by dots, none of them after the first `get` (a dict's
        method, by the lookup rule: pyexpr's code reads it)."""
        head, *rest = source.split(".")
        return head.isidentifier() and all(part.isidentifier() and part != "get" for part in rest) \
            and source not in ("omit", "none", "None", "true", "false")

    # -- JSON bytes -------------------------------------------------------------------------
    def gen(self, node: Any, where: str) -> Gen:
        return self._kinds[node_kind(node)](node, where)

    def _list(self, node: list, where: str) -> Gen:
        return self._sequence([self.gen(v, f"{where}[{i}]") for i, v in enumerate(node)])

    def _leaf(self, text: str, where: str) -> Gen:
        if "{{" not in text and "{%" not in text:
            return _const(dumps(text))
        whole = text.replace(" ", "")
        if whole.startswith("{{") and whole.endswith("}}") and whole[2:-2] in self._subst:
            local, is_json = self._subst[whole[2:-2]]
            if is_json:                             # a `$with` value, already JSON
                self._var(whole[2:-2])
                if isinstance(local, Gen):          # generated here (`with_binds`, in place)
                    return local
                return _const(literal_eval(local)) if local[0] == "b" else Gen(local)
        code = self.value_code(text, where)
        if not self._may_omit(text) and code not in self.omittable_locals:
            echoed = echoed_with_default(code)
            if echoed is not None:          # its default's JSON a constant: no `given`, no dumps
                got, default = echoed
                v = f"_v{next(self._ids)}"
                return Gen(f"({default!r} if ({v} := {got}) is None else _d({v}))")
            if _COUNTER.search(text):       # most likely a small int: from a table
                v = f"_v{next(self._ids)}"
                return Gen(f"(_D[{v}] if ({v} := {code}).__class__ is int and -1 < {v} < {len(SMALL_INTS)} "
                           f"else _d({v}))")
            return Gen(f"_d({code})")
        v = f"_v{next(self._ids)}"
        return Gen(f"(None if ({v} := {code}) is OMIT else _d({v}))", omittable=True)

    @staticmethod
    def _may_omit(text: str) -> bool:
        return "omit" in text

    def _entry(self, node: Any, where: str) -> tuple[Gen, str | None]:
        """A dict entry's code, and the memo that may keep it (None: computed every time). An
        entry that embeds no object (whose reads are not tracked) and reads only variables
        that no template rebinds (the ones a template is rendered with: plan, req, ...) has
        one value per render (`_m`); one whose rebound variables are all `_loop_fixed`, one value
        per run of its event's loop (`_lr`: a local of the stream's function, `LOOP_RUN`)."""
        reads: set[str] = set()
        self._reads.append(reads)
        try:
            gen = self.gen(node, where)
        finally:
            self._reads.pop()
        if gen.const is not None:
            return gen, "_m"
        if not self._memo or gen.omittable or "__opaque__" in reads or any(read[0] == LOCAL for read in reads):
            return gen, None
        rebound = reads & self.bound
        return gen, "_m" if not rebound else "_lr" if rebound <= self._loop_fixed else None

    def _memoised(self, entries: list) -> list:
        """Runs of memoisable entries -> one entry each whose code is looked up in a memo: the
        render's (`ctx['__memo']`, one dict per `Template.events` / `body_json` call), or, when
        one entry of the run reads an outer loop's variable, a local set once per run of the
        event's loop (`_lrN`, None until then: llmsim.render.stepcodegen resets it as the loop starts)."""
        out, run = [], []

        def close_run():
            if any(g.const is None for _, g, _ in run):
                key = next(self._memo_ids)
                parts: list = []
                for i, (prefix, g, _) in enumerate(run):
                    parts += [b"," + prefix if i else prefix, g.const if g.const is not None else g]
                if any(m == "_lr" for _, _, m in run):
                    local = f"_lr{key}"
                    code = f"({local} if {local} is not None else ({local} := {_concat(parts)}))"
                else:
                    code = f"(_m[{key}] if {key} in _m else _m.setdefault({key}, {_concat(parts)}))"
                out.append((b"", Gen(code), None))
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
                parts += [b"," + prefix if i else prefix, g.const if g.const is not None else g]
            return _joined([*parts, b"}"])
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
                run += [b"," if run else b"", prefix, g.const if g.const is not None else g]
        if run:
            elements.append(_concat(run))
        return Gen(f'b"{{" + _commas(({", ".join(elements)},)) + b"}}"')

    def _sequence(self, items: list[Gen]) -> Gen:
        if all(g.const is not None for g in items):
            return _const(b"[" + b",".join(g.const for g in items) + b"]")
        if len(items) == 1 and items[0].omittable:
            v = f"_v{next(self._ids)}"
            return Gen(f'(b"[]" if ({v} := {items[0].code}) is None else b"[" + {v} + b"]")')
        if any(g.omittable for g in items):
            return Gen(f'b"[" + _commas(({", ".join(g.code for g in items)},)) + b"]"')
        parts: list = [b"["]
        for i, g in enumerate(items):
            parts += [b"," if i else b"", g.const if g.const is not None else g]
        return _joined([*parts, b"]"])

    def _object(self, node: dict, where: str) -> Gen:
        name = node["$object"]
        fixed = isinstance(name, str) and "{{" not in name
        extra = node.get("$with") or {}
        if fixed and self._inlinable(name, set()):
            return self._inline(name, extra, where)
        if not fixed and not extra:
            chosen = self._inline_choice(name, where)
            if chosen is not None:
                return chosen
        for reads in self._reads:           # the called writer's reads are not tracked here
            reads.add("__opaque__")
        ctx = "ctx"
        if extra:
            items = ", ".join(f"{k!r}: {self._with_code(name if fixed else None, k, v, f'{where}.$with.{k}')}"
                              for k, v in extra.items())
            ctx = f"{{**ctx, {items}}}"
        omittable = not fixed or self._object_may_omit(name, set())
        code = f"{self._object_function(name, fixed, where)}({ctx})"
        key = self._call_key(name, extra) if fixed else None
        if key is not None:
            code = f"(_m[{key}] if {key} in _m else _m.setdefault({key}, {code}))"
        return Gen(code, omittable=omittable)

    def _call_key(self, name: str, extra: dict) -> int | None:
        """The render memo key of a call of the object `name` in an event whose value is the
        same wherever it is made in one render: its `$with` values are constants, and
        neither it nor what it embeds reads a variable that changes between events (a
        Responses stream's `created` and `in_progress` carry the same response: written
        once). None when it may differ, or the context may hold more than the render's
        variables and the event's loops' (in an object's own writer)."""
        if not self._memo or self._in_object or not all(
                v is None or isinstance(v, (bool, int, float)) or (isinstance(v, str) and "{" not in v)
                for v in extra.values()):
            return None
        try:
            free = free_names({"$object": name, "$with": extra}, self.raw_objects, self._reads_of)
        except Exception:       # an expression jinja cannot parse: its own writer says so
            return None
        if free is None or free & self.varying:
            return None
        call = (name, *sorted((k, type(v).__name__, v) for k, v in extra.items()))
        key = self._call_keys.get(call)
        if key is None:
            key = self._call_keys[call] = next(self._memo_ids)
        return key

    def _reads_of(self, text: str) -> set[str]:
        return set(_reads(text))

    def _object_function(self, name: Any, fixed: bool, where: str) -> str:
        """Code giving the writer of the object `name` (an expression unless `fixed`). For
        `"prefix{{ dotted.name }}suffix"`, each string value's writer is remembered at the
        call site, so a stream's events do not build and hash the name again."""
        if fixed:
            return f"_fast[{name!r}]"
        parts = self._name_parts(name)
        if parts is None:
            return f"_fast[{self.value_code(name, f'{where}.$object')}]"
        prefix, dotted, suffix = parts
        fast = self.fast
        site: dict[str, Writer] = {}

        def resolve(value):
            found = fast[prefix + format(value) + suffix]
            if value.__class__ is str and len(site) < 64:
                site[value] = found
            return found
        value = self.value_code("{{" + dotted + "}}", f"{where}.$object")
        v, cache = f"_v{next(self._ids)}", self._callable(site)
        return f"({cache}[{v}] if ({v} := {value}) in {cache} else {self._callable(resolve)}({v}))"

    def _name_parts(self, name: Any) -> tuple[str, str, str] | None:
        """`"prefix{{ dotted.name }}suffix"` -> (prefix, "dotted.name", suffix); else None."""
        one = ONE_NAME.match(name) if isinstance(name, str) else None
        if one is None or not self._dotted(one.group(2)):
            return None
        return one.group(1), one.group(2), one.group(3)

    def picks(self, name: Any) -> tuple[str, dict[str, str]] | None:
        """For `$object: "prefix{{ dotted.name }}suffix"`: the dotted name, and the objects the
        name can pick (at most `MAX_PICKS`), by the part of their names the value is; None for
        any other name."""
        parts = self._name_parts(name)
        if parts is None:
            return None
        prefix, dotted, suffix = parts
        picks = {obj[len(prefix):len(obj) - len(suffix)]: obj for obj in self.raw_objects
                 if len(obj) > len(prefix) + len(suffix) and obj.startswith(prefix) and obj.endswith(suffix)}
        return (dotted, picks) if picks and len(picks) <= self.MAX_PICKS else None

    def _inline_choice(self, name: Any, where: str) -> Gen | None:
        """`$object: "prefix{{ dotted.name }}suffix"` (no `$with`): each inlinable object the
        name can pick written in place, picked by comparing the value with its part of the
        name (a chat chunk's `kind`: no call per chunk), and any other value (one naming an
        object that loops, say) looked up as before."""
        found = self.picks(name)
        if found is None:
            return None
        dotted, every = found
        picks = {part: obj for part, obj in every.items() if self._inlinable(obj, set())}
        if not picks:
            return None
        value = self.value_code("{{" + dotted + "}}", f"{where}.$object")
        v = f"_v{next(self._ids)}"
        tests, gens = [], []
        for i, (part, obj) in enumerate(picks.items()):
            gens.append(self._inline(obj, {}, where))
            tests.append(f"({v} := {value}) == {part!r}" if i == 0 else f"{v} == {part!r}")
        for reads in self._reads:           # the fallback's reads are not tracked here
            reads.add("__opaque__")
        # other values call the object they name (or raise): omitted only if some pick omits
        omittable = any(self._object_may_omit(obj, set()) for obj in every.values())
        return _chosen(tuple(tests), tuple(gens), f"{self._object_function(name, False, where)}(ctx)",
                       omittable)

    def _inlinable(self, name: str, seen: set) -> bool:
        """Whether the object `name` can be written in its user's code: it exists, is not
        being inlined already, and neither it nor what it embeds loops or names an object by
        an expression (those need their own function and a context holding `$with`)."""
        if name in seen or name in self._inlining or name not in self.raw_objects:
            return False
        return self._flat(self.raw_objects[name], seen | {name})

    def _flat(self, node: Any, seen: set) -> bool:
        if isinstance(node, list):
            return all(self._flat(v, seen) for v in node)
        if not isinstance(node, dict):
            return True
        if "$for" in node:
            return False
        if "$object" in node:
            inner = node["$object"]
            return isinstance(inner, str) and "{{" not in inner and self._inlinable(inner, seen) \
                and all(self._flat(v, seen) for v in (node.get("$with") or {}).values())
        return all(self._flat(v, seen) for v in node.values())

    def _inline(self, name: str, extra: dict, where: str) -> Gen:
        """The object's code in place, each `$with` value computed first into a local."""
        binds, subst = self.with_binds(name, extra, where, in_place=True)
        with self.inlining(name, subst):
            gen = self.gen(self.raw_objects[name], f"objects.{name}")
        if not binds or gen.const is not None:
            return gen
        return Gen(f"({', '.join(binds)}, {gen.code})[-1]", omittable=gen.omittable)

    def with_binds(self, name: str, extra: dict, where: str, in_place: bool = False) -> tuple[list[str], dict]:
        """Code binding each `$with` value of the object `name` to a local (its JSON bytes when
        the object only writes it out whole), and the variables as the object reads them.
        `in_place`: a list or mapping the object writes out whole exactly once is not bound
        but generated where it is written (its `Gen` in the substitutions), so that the
        object's join takes in its parts."""
        raw, binds, subst = self.raw_objects[name], [], dict(self._subst)
        for var, node in extra.items():
            if node is None or isinstance(node, (bool, int, str)) and "{" not in str(node):
                # a constant: its JSON written in place (a chat chunk's `usage: null`) or its
                # literal read, no local
                whole = self._used_whole(raw, var, set())
                subst[var] = (repr(dumps(node)), True) if whole else (repr(node), False)
                continue
            local, at = f"_wv{next(self._ids)}", f"{where}.$with.{var}"
            if isinstance(node, (list, dict)) and self._used_whole(raw, var, set()):
                gen = self.gen(node, at)
                if not gen.omittable:
                    if in_place and self._whole_uses(raw, var, set()) == 1:
                        subst[var] = (gen, True)    # written where it is used: one join
                        continue
                    binds.append(f"({local} := {gen.code})")
                    subst[var] = (local, True)
                    continue
            binds.append(f"({local} := {self.value_code(node, at)})")
            subst[var] = (local, False)
            if self._may_omit(str(node)):       # (`$with: {n: "{{ omit }}"}`: no entry)
                self.omittable_locals.add(local)
        return binds, subst

    # -- what llmsim.render.jsonvaluegen builds on (its public interface to this compiler) ---
    def new_local(self, prefix: str = "_v") -> str:
        """A name no other generated code uses."""
        return f"{prefix}{next(self._ids)}"

    def binding(self, var: str) -> tuple[Any, bool] | None:
        """How the code being generated holds `var` (a local, and whether it holds its JSON), if it does."""
        return self._subst.get(var)

    def read(self, var: str) -> None:
        """The code being generated reads `var` (what an object called by value must be given)."""
        self._var(var)

    def known(self) -> set[str]:
        """The variables the code being generated holds or reads already."""
        return {*self._subst, *self._names}

    def free_names(self, node: Any) -> set[str] | None:
        """The variables `node` reads (None: not known, it reads the context whole)."""
        return free_names(node, self.raw_objects, self._reads_of)

    def inlinable(self, name: Any) -> bool:
        """Whether the object `name` (fixed, known, not being inlined) may be inlined."""
        return isinstance(name, str) and "{{" not in name and name in self.raw_objects \
            and name not in self._inlining

    def may_omit(self, text: str) -> bool:
        return self._may_omit(text)

    @contextmanager
    def holding(self, var: str, local: str):
        """While the code being generated holds `var` in `local` (a loop's item)."""
        outer, self._subst = self._subst, {**self._subst, var: (local, False)}
        try:
            yield
        finally:
            self._subst = outer

    def sealed(self, generate: Callable[[], Any]) -> Any:
        """`generate()`, if nothing it generated reads the context as a whole (a closure, an
        object named by expression: those would miss the variables held in locals); else
        None, what it read forgotten."""
        reads: set[str] = set()
        names = set(self._names)
        self._reads.append(reads)
        try:
            value = generate()
        finally:
            self._reads.pop()
        if "__opaque__" in reads:
            self._names.intersection_update(names)
            return None
        for outer in self._reads:
            outer |= reads
        return value

    def held_json(self, node: Any, where: str) -> Gen:
        """`node`'s JSON as this module writes it, for code holding variables in locals: in
        place when none is held, else a call of a function of its own given a context that
        holds them."""
        bindings, reads = self._subst, self._reads
        self._reads = []              # what it reads of the context, the call passes
        try:
            if not bindings:
                return self.gen(node, where)
            outer_names, self._names, self._subst = self._names, set(), {}
            try:
                gen = self.gen(node, where)
                names = self._names
            finally:
                self._names, self._subst = outer_names, bindings
        finally:
            self._reads = reads
        if gen.const is not None:
            return gen
        function = self._callable(self._define(gen.code, names))
        held = ", ".join(f"{var!r}: {f'_F({local})' if is_json else local}"
                         for var, (local, is_json) in bindings.items())
        for var in bindings:
            self._var(var)
        return gen._replace(code=f"{function}({{**ctx, {held}}})")

    @contextmanager
    def inlining(self, name: str, subst: dict):
        """While the object `name` is generated in place, with `subst` (from `with_binds`)."""
        outer, self._subst = self._subst, subst
        self._inlining.add(name)
        try:
            yield
        finally:
            self._subst = outer
            self._inlining.discard(name)

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
            return not mentions(str(node["$for"])) and not mentions(str(node.get("$key", ""))) \
                and self._used_whole(node.get("$do"), var, seen)
        if "$if" in node:
            return not mentions(str(node["$if"])) and all(
                self._used_whole(node.get(k), var, seen) for k in ("$then", "$else"))
        return all(self._used_whole(v, var, seen) for v in node.values())

    def _whole_uses(self, node: Any, var: str, seen: set) -> int:
        """How many times `node` (where `_used_whole` holds for `var`) writes `var` out, the
        objects it embeds included; 2 (more than once) when that is not plain: a use inside a
        loop, or an embedded object that binds `var` itself."""
        if isinstance(node, str):
            return int(node.replace(" ", "") == "{{" + var + "}}")
        if isinstance(node, list):
            return sum(self._whole_uses(v, var, seen) for v in node)
        if not isinstance(node, dict):
            return 0
        if "$for" in node:
            return 2 * bool(self._whole_uses(node.get("$do"), var, seen))
        if "$object" in node:
            name, extra = node["$object"], node.get("$with") or {}
            if var in extra or name in seen:
                return 2
            return self._whole_uses(self.raw_objects.get(name), var, seen | {name})
        if "$if" in node:
            return sum(self._whole_uses(node.get(k), var, seen) for k in ("$then", "$else"))
        return sum(self._whole_uses(v, var, seen) for v in node.values())

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
        # the loop variable read in the body is the loop's own: an entry holding the whole
        # loop does not read it (so a loop over request data is memoised with the request)
        outer_reads, self._reads = self._reads, [_Without(reads, var) for reads in self._reads]
        self._local_loops.append(var)
        try:
            if "$key" in node:
                return self._mapping(node, var, source, where)
            body, names = self._scoped(node.get("$do"), f"{where}.$do")
        finally:
            self._reads = outer_reads
            self._local_loops.pop()
        # the source held in a local (a comprehension may not iterate over an expression
        # holding `:=`), and an empty list (most requests' tools) written without running one
        held = f"_s{next(self._ids)}"
        if body.const is not None:
            code = f'b"[" + b",".join([{body.code} for _ in {held}]) + b"]"'
        else:
            name = self._callable(self._define(body.code, names))
            code = f'b"[" + _commas([{name}({{**ctx, {var!r}: _it}}) for _it in {held}]) + b"]"'
        return Gen(f'(b"[]" if ({held} := {source}).__class__ is list and not {held} else {code})')

    def _mapping(self, node: dict, var: str, source: str, where: str) -> Gen:
        """`$for` with `$key`: a function of the item's context gives its (key, JSON bytes),
        or None when the value is omitted (its key then not rendered); the pairs are written
        as one JSON object (a later equal key replaces an earlier one's value, as in a dict)."""
        outer, self._names = self._names, set()
        try:
            key = self.value_code(node["$key"], f"{where}.$key")
            body = self.gen(node.get("$do"), f"{where}.$do")
            names = self._names
        finally:
            self._names = outer
        if body.omittable:
            v = f"_v{next(self._ids)}"
            pair = f"(None if ({v} := {body.code}) is None else (_entry_key({key}), {v}))"
        else:
            pair = f"(_entry_key({key}), {body.code})"
        name = self._callable(self._define(pair, names))
        held = f"_s{next(self._ids)}"
        code = (f"_d({{_p[0]: _F(_p[1]) for _p in [{name}({{**ctx, {var!r}: _it}}) for _it in {held}] "
                f"if _p is not None}})")
        return Gen(f'(b"{{}}" if ({held} := {source}).__class__ is list and not {held} else {code})')

    def _if(self, node: dict, where: str) -> Gen:
        test = self.value_code(node["$if"], f"{where}.$if")
        then = self.gen(node.get("$then"), f"{where}.$then")
        other = self.gen(node["$else"], f"{where}.$else") if "$else" in node else Gen("None", omittable=True)
        return _chosen((test,), (then,), other.code, then.omittable or other.omittable)


_PARSER = jinja2.Environment()     # the syntax every template environment shares (pyexpr.Environment)


@cache
def _reads(text: str) -> frozenset[str]:
    """The variables an expression or string template reads: a pure function of its text, so
    each distinct text is parsed once per process (templates repeat their expressions, and
    tests build many apps from the same files)."""
    return frozenset(meta.find_undeclared_variables(_PARSER.parse(text)))
