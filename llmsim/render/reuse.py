"""Repeated reads in a generated expression computed once (common subexpression reuse).

Generated code reads `plan.usage.input_tokens` as `(u['input_tokens'] if (u := (p['usage'] if
p.__class__ is dict else p.usage)).__class__ is dict else u.input_tokens)`, and a template
reads `plan.usage` and `plan`'s class many times. `reuse` rewrites one expression so that a
read of a chain of keys/attributes (and each `x.__class__ is dict` test of a variable) is
held in a temporary (`_rN`, `_tN`, by `:=`) where first computed, and later reads read it.
Invariant: the same value, the same error: a read is reused only where the first one is
evaluated on every path reaching it (it dominates it: not first under a condition, in a
loop or a short-circuit and then reused outside); what is read is data no step of the
expression changes, and what a loop iterates is read afresh (it may be an iterator).
`counted`: a stream's `seq` counter written from the small-int table after one bound test.
The story: docs/internals.md#renderreuse.
"""
from __future__ import annotations

import ast
import itertools
import re
from collections import Counter, defaultdict

_TEMPS = itertools.count()
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class _Lookup(ast.expr):
    """`base.name` by the lookup rule (a dict's key, else the attribute), or with `item`
    `base[name]`, while rewriting. `key`: what it reads (a stable variable and the names
    after it), or None; `temp`: the local the original held `base` in."""
    _fields = ("base",)

    def __init__(self, base: ast.expr, name: str, key: tuple | None, temp: str | None, item: bool = False):
        super().__init__()
        self.base, self.name, self.key, self.temp, self.item = base, name, key, temp, item
        self.dead = False       # inside a reused read: never evaluated


def _is_dict_test(node: ast.AST) -> ast.expr | None:
    """`X.__class__ is dict`: X; else None."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Is) \
            and isinstance(node.left, ast.Attribute) and node.left.attr == "__class__" \
            and isinstance(node.comparators[0], ast.Name) and node.comparators[0].id == "dict":
        return node.left.value
    return None


def _stores(tree: ast.AST) -> Counter:
    """How many places bind each name (`:=`, a comprehension's target)."""
    stores: Counter = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] += 1
    return stores


def _read_parts(node: ast.AST) -> tuple[ast.expr, str, str] | None:
    """`(t[k] if X.__class__ is dict else t.k)`: (X, t, k); else None."""
    if not isinstance(node, ast.IfExp):
        return None
    held, body, other = _is_dict_test(node.test), node.body, node.orelse
    if held is None or not (isinstance(body, ast.Subscript) and isinstance(body.value, ast.Name)
                            and isinstance(body.slice, ast.Constant) and isinstance(body.slice.value, str)
                            and isinstance(other, ast.Attribute) and isinstance(other.value, ast.Name)
                            and other.attr == body.slice.value and other.value.id == body.value.id):
        return None
    return held, body.value.id, other.attr


def _own_temps(tree: ast.AST, stores: Counter, loads: Counter) -> set[str]:
    """The temporaries read only by the read that binds them, `(t[k] if (t := E).__class__
    is dict else t.k)` (each such read may bind the same one: a choice's branches repeat code)."""
    bound: Counter = Counter()
    for node in ast.walk(tree):
        parts = _read_parts(node)
        if parts is not None and isinstance(parts[0], ast.NamedExpr) and parts[0].target.id == parts[1]:
            bound[parts[1]] += 1
    return {t for t, n in bound.items() if n == stores[t] and loads[t] == 2 * n}


class _Canonical(ast.NodeTransformer):
    """Each generated read `(t[k] if (t := E).__class__ is dict else t.k)` (or of a variable
    `t`) -> `_Lookup(E or t, k)`; `x['k']` of a variable -> `_Lookup(x, 'k', item=True)`."""

    def __init__(self, stable: set[str], own: set[str]):
        self.stable, self.own = stable, own

    def _key(self, base: ast.expr, name: str) -> tuple | None:
        if isinstance(base, ast.Name):
            return (base.id, name) if base.id in self.stable else None
        return (*base.key, name) if isinstance(base, _Lookup) and base.key is not None else None

    def visit_Subscript(self, node: ast.Subscript):
        """`x['k']` of a variable `x` (a context read)."""
        node = self.generic_visit(node)
        if isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name) \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            name = node.slice.value
            return _Lookup(node.value, name, self._key(node.value, f"[{name}]"), None, item=True)
        return node

    def visit_IfExp(self, node: ast.IfExp):
        parts = _read_parts(node)
        if parts is None:
            return self.generic_visit(node)
        held, var, name = parts
        if isinstance(held, ast.Name) and held.id == var:
            base, temp = held, None
        elif isinstance(held, ast.NamedExpr) and held.target.id == var and var in self.own:
            base, temp = self.visit(held.value), var
        else:
            return self.generic_visit(node)
        return _Lookup(base, name, self._key(base, name), temp)


def _iterated_read_afresh(tree: ast.AST) -> None:
    """A read a comprehension iterates (itself, or held in the temporary it iterates) is
    neither held nor reused: a property may give a new iterator each time (a plan's
    `timed_pieces`), which one loop would use up for the next."""
    iterated = [gen.iter for node in ast.walk(tree) if isinstance(node, _COMPREHENSIONS)
                for gen in node.generators]
    names = {node.id for node in iterated if isinstance(node, ast.Name)}
    iterated += [node.value for node in ast.walk(tree)
                 if isinstance(node, ast.NamedExpr) and node.target.id in names]
    while iterated:
        node = iterated.pop()
        if isinstance(node, _Lookup):
            node.key = None
        elif isinstance(node, ast.IfExp):
            iterated += [node.body, node.orelse]
        elif isinstance(node, ast.BoolOp):
            iterated += node.values


def _occurrences(node: ast.AST, ctx: tuple, bindable: bool, found: list, test_of) -> None:
    """What `test_of(node)` keys, in evaluation order, each with the conditions under which it
    is evaluated (`ctx`: a path of branches, a prefix of another's when it dominates it) and
    whether `:=` may stand there (not in a comprehension's iterable)."""
    def walk(child, inner=ctx, may_bind=bindable):
        _occurrences(child, inner, may_bind, found, test_of)
    if isinstance(node, ast.Lambda):
        return                                  # runs later, maybe never: no reuse inside
    if isinstance(node, ast.IfExp):
        walk(node.test)
        walk(node.body, (*ctx, (id(node), 0)))
        walk(node.orelse, (*ctx, (id(node), 1)))
    elif isinstance(node, (ast.BoolOp, ast.Compare)):
        # `a or b or c`: b runs only if a did not decide, c only if b did not; `a < b < c`: c
        # only if `a < b`
        values, first = (node.values, 1) if isinstance(node, ast.BoolOp) else ([node.left, *node.comparators], 2)
        inner = ctx
        for i, value in enumerate(values):
            if i >= first:
                inner = (*inner, (id(node), i))
            walk(value, inner)
    elif isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values):
            if key is not None:
                walk(key)
            walk(value)
    elif isinstance(node, _COMPREHENSIONS):
        first, *rest = node.generators
        walk(first.iter, ctx, False)
        inner = (*ctx, (id(node), "loop"))      # zero or more times, each its own
        for test in first.ifs:
            walk(test, inner)
            inner = (*inner, (id(test), "if"))
        for gen in rest:
            walk(gen.iter, inner, False)
            inner = (*inner, (id(gen), "loop"))
            for test in gen.ifs:
                walk(test, inner)
                inner = (*inner, (id(test), "if"))
        if isinstance(node, ast.DictComp):
            walk(node.key, inner)
            walk(node.value, inner)
        else:
            walk(node.elt, inner)
    else:
        if isinstance(node, _Lookup):
            walk(node.base)
        else:
            for child in ast.iter_child_nodes(node):
                walk(child)
    key = test_of(node)
    if key is not None:
        found.append((key, node, ctx, bindable))


def _decide(found: list, prefix: str, order=None) -> dict:
    """For the occurrences of each key: the node -> ("bind" | "reuse", temporary) of each
    that sets one (it dominates a later one) or reads one (a dominating one set it)."""
    by_key: dict = defaultdict(list)
    for key, node, ctx, bindable in found:
        by_key[key].append((node, ctx, bindable))
    done: dict = {}
    for key in sorted(by_key, key=order) if order else by_key:
        seen = [o for o in by_key[key] if not getattr(o[0], "dead", False)]
        bound: list = []
        for i, (node, ctx, bindable) in enumerate(seen):
            temp = next((t for c, t in bound if ctx[:len(c)] == c), None)
            if temp is not None:
                done[id(node)] = ("reuse", temp)
                for inner in ast.walk(node):
                    if inner is not node and isinstance(inner, _Lookup):
                        inner.dead = True
            elif bindable and any(later[:len(ctx)] == ctx for _, later, _ in seen[i + 1:]):
                temp = f"{prefix}{next(_TEMPS)}"
                bound.append((ctx, temp))
                done[id(node)] = ("bind", temp)
    return done


class _Rebuild(ast.NodeTransformer):
    """`_Lookup`s back to Python, each holding or reading its temporary as decided."""

    def __init__(self, done: dict):
        self.done = done

    def visit__Lookup(self, node: _Lookup):
        how, temp = self.done.get(id(node), (None, None))
        if how == "reuse":
            return ast.Name(temp, ast.Load())
        base = self.visit(node.base)
        if node.item:
            code = ast.Subscript(base, ast.Constant(node.name), ast.Load())
            return ast.NamedExpr(ast.Name(temp, ast.Store()), code) if how == "bind" else code
        if isinstance(base, ast.Name):
            var, held = base.id, base
        elif isinstance(base, ast.NamedExpr):
            var, held = base.target.id, base
        else:
            var = node.temp or f"_r{next(_TEMPS)}"
            held = ast.NamedExpr(ast.Name(var, ast.Store()), base)
        code = ast.IfExp(ast.Compare(ast.Attribute(held, "__class__", ast.Load()), [ast.Is()],
                                     [ast.Name("dict", ast.Load())]),
                         ast.Subscript(ast.Name(var, ast.Load()), ast.Constant(node.name), ast.Load()),
                         ast.Attribute(ast.Name(var, ast.Load()), node.name, ast.Load()))
        return ast.NamedExpr(ast.Name(temp, ast.Store()), code) if how == "bind" else code


class _Tests(ast.NodeTransformer):
    def __init__(self, done: dict):
        self.done = done

    def visit_Compare(self, node: ast.Compare):
        node = self.generic_visit(node)
        how, temp = self.done.get(id(node), (None, None))
        if how == "reuse":
            return ast.Name(temp, ast.Load())
        return ast.NamedExpr(ast.Name(temp, ast.Store()), node) if how == "bind" else node


_TEMP = re.compile(r"^_(?:v|a|g|s|r|t|wv)\d+$")      # the temporaries generated expressions bind


class _Copies(ast.NodeTransformer):
    """`(t := x)` of a variable `x` the expression does not bind -> `x`, each `t` read as `x`."""

    def __init__(self, tree: ast.AST, stores: Counter):
        copied = {node.target.id: node.value.id for node in ast.walk(tree)
                  if isinstance(node, ast.NamedExpr) and isinstance(node.value, ast.Name)
                  and _TEMP.match(node.target.id) and stores[node.target.id] == 1}
        self.copies = {}
        for temp, name in copied.items():
            while name in copied:       # a copy of a copy
                name = copied[name]
            if not stores[name]:
                self.copies[temp] = name

    def visit_NamedExpr(self, node: ast.NamedExpr):
        return self.visit(node.value) if node.target.id in self.copies else self.generic_visit(node)

    def visit_Name(self, node: ast.Name):
        if node.id in self.copies and isinstance(node.ctx, ast.Load):
            return ast.Name(self.copies[node.id], ast.Load())
        return node


def reuse(code: str) -> str:
    """Python expression `code` with its repeated reads computed once (see the module)."""
    if ":=" not in code and code.count(".__class__ is dict") < 2:
        return code
    tree = ast.parse(code, mode="eval")
    stores = _stores(tree)
    tree = _Copies(tree, stores).visit(tree)      # (a temporary is read only after it is bound)
    stores = _stores(tree)
    loads = Counter(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
    stable = {name for name in loads if stores[name] <= 1}

    # 1. chains of reads: the longest first (a reused read is not evaluated, nor what it reads)
    tree = _Canonical(stable, _own_temps(tree, stores, loads)).visit(tree)
    _iterated_read_afresh(tree)
    found: list = []
    _occurrences(tree.body, (), True, found, lambda n: n.key if isinstance(n, _Lookup) else None)
    tree = _Rebuild(_decide(found, "_r", order=lambda key: -len(key))).visit(tree)

    # 2. `x.__class__ is dict` of a variable bound at most once
    stores = _stores(tree)
    stable = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and stores[n.id] <= 1}

    def test_of(node):
        held = _is_dict_test(node)
        if isinstance(held, ast.NamedExpr):         # `(_r1 := ...).__class__ is dict`
            held = held.target
        return held.id if isinstance(held, ast.Name) and held.id in stable else None
    found = []
    _occurrences(tree.body, (), True, found, test_of)
    tree = _Tests(_decide(found, "_t")).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


class _Counted(ast.NodeTransformer):
    def __init__(self, names: set[str]):
        self.names = names

    def visit_IfExp(self, node: ast.IfExp):
        node = self.generic_visit(node)
        test = node.test            # `v.__class__ is int and -1 < v < N` (jsoncodegen's small-int test)
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and len(test.values) == 2:
            is_int, bounds = test.values
            var = is_int.left if isinstance(is_int, ast.Compare) else None
            if isinstance(var, ast.Attribute) and var.attr == "__class__" and isinstance(var.value, ast.Name) \
                    and var.value.id in self.names and isinstance(is_int.comparators[0], ast.Name) \
                    and is_int.comparators[0].id == "int" and isinstance(bounds, ast.Compare) \
                    and len(bounds.ops) == 2 and ast.unparse(bounds.left) == "-1" \
                    and isinstance(bounds.comparators[0], ast.Name) and bounds.comparators[0].id == var.value.id:
                node.test = ast.Compare(bounds.comparators[0], [bounds.ops[1]], [bounds.comparators[1]])
        return node


def counted(code: str, names: set[str]) -> str:
    """Python expression `code` with each small-int test of a variable of `names`, known to
    hold a non-negative int (a stream's `seq` counter), reduced to its upper bound."""
    if not any(f"{name}.__class__ is int" in code for name in names):
        return code
    tree = _Counted(names).visit(ast.parse(code, mode="eval"))
    return ast.unparse(ast.fix_missing_locations(tree))
