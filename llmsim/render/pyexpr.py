"""The template expression language: its lookup rule, and simple expressions run as Python.

One lookup rule for every expression wherever it runs (jinja, the closures, generated code):
`a.b` is a dict's key `b` (`a.get` its `get` method), else the attribute; `a[k]` the item; a
missing one is jinja's strict Undefined, fine for `given(...)` and tests, an error used any
other way. Expressions made of the syntax Python shares are translated once into Python with
that rule; anything else (filters, `~`, `**`, other tests) stays jinja's.
The story: docs/internals.md#renderpyexpr.
"""
from __future__ import annotations

import ast
import io
import itertools
import tokenize
from typing import Any, Callable

import jinja2

_CONSTANTS = {"none": "None", "None": "None", "true": "True", "True": "True",
              "false": "False", "False": "False"}
_UNSUPPORTED_OPS = {"|", "~", "**"}     # (jinja reads -2 ** 2 as (-2) ** 2, and ** left to right)
# jinja tests with a Python twin: `x is string` -> _test_string(x); `is not` negates.
_TESTS = {"string": lambda value: isinstance(value, str),
          "defined": lambda value: not isinstance(value, jinja2.Undefined)}


def lookup_attr(obj: Any, name: str) -> Any:
    """`obj.name` by the lookup rule: a dict's key (`get`: its method), else the attribute;
    Undefined when missing. Looking anything up in Undefined is an error."""
    if obj.__class__ is dict:
        if name in obj and name != "get":
            return obj[name]
        return obj.get if name == "get" else jinja2.StrictUndefined(obj=obj, name=name)
    try:
        return getattr(obj, name)
    except AttributeError:
        return jinja2.StrictUndefined(obj=obj, name=name)


def lookup_item(obj: Any, key: Any) -> Any:
    """`obj[key]` by the lookup rule: the item; Undefined when missing (or `obj` has no items)."""
    try:
        return obj[key]             # (Undefined's own `[]` raises UndefinedError)
    except (LookupError, TypeError):
        return jinja2.StrictUndefined(obj=obj, name=key)


_attr, _item = lookup_attr, lookup_item       # (as generated code calls them)


class Environment(jinja2.Environment):
    """jinja with the lookup rule (jinja's own prefers an attribute: `req.items` would be the
    dict's method)."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        return lookup_attr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        return lookup_item(obj, argument)


def _name(ctx: dict, name: str) -> Any:
    """A variable; missing ones are jinja's strict Undefined (fine to pass, fatal to use)."""
    try:
        return ctx[name]
    except KeyError:
        return jinja2.StrictUndefined(name=name)


def _translate(source: str) -> str | None:
    out, prev = [], None
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in _UNSUPPORTED_OPS:
            return None
        text = tok.string
        if tok.type == tokenize.NAME:
            if prev == "is" or (prev == "not" and i >= 2 and tokens[i - 2].string == "is"):
                if text in _TESTS:
                    text = f"_test_{text}"
                elif text not in ("none", "None", "not"):
                    return None          # a jinja test without a Python twin
            if text in _CONSTANTS and prev != ".":
                text = _CONSTANTS[text]
        out.append((tok.type, text))
        prev = tok.string
    try:
        return tokenize.untokenize(out).strip()
    except (ValueError, TypeError):
        return None


def _fold_is(node: ast.Compare) -> ast.Constant | None:
    """`0 is None` (a constant tested with `is`): its known result (Python warns of the test)."""
    if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) and \
            isinstance(node.left, ast.Constant) and isinstance(node.comparators[0], ast.Constant):
        same = node.left.value is node.comparators[0].value
        return ast.copy_location(ast.Constant(same == isinstance(node.ops[0], ast.Is)), node)
    return None


class _FoldIs(ast.NodeTransformer):
    def visit_Compare(self, node: ast.Compare):
        return _fold_is(node) or self.generic_visit(node)


def fold_constant_tests(code: str) -> str:
    """Generated `code` with each constant's `is` test folded: a `$with` constant spliced in
    for a variable (`7 is None`) is known."""
    return ast.unparse(_FoldIs().visit(ast.parse(code, mode="eval")))


class _Rewrite(ast.NodeTransformer):
    """Names -> _name(ctx, 'name') (globals stay globals); `a.b` -> _attr(a, 'b'); `a[k]` ->
    _item(a, k)."""

    def __init__(self, global_names: set[str]):
        self.global_names = global_names

    def visit_Compare(self, node: ast.Compare):
        """`x is _test_string` (from `x is string`) -> `_test_string(x)`."""
        test = node.comparators[0] if len(node.ops) == 1 else None
        if isinstance(test, ast.Name) and test.id.startswith("_test_") and \
                isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            call = ast.Call(ast.Name(test.id, ast.Load()), [self.visit(node.left)], [])
            result = call if isinstance(node.ops[0], ast.Is) else ast.UnaryOp(ast.Not(), call)
            return ast.copy_location(result, node)
        return _fold_is(node) or self.generic_visit(node)

    def visit_Name(self, node: ast.Name):
        if node.id in self.global_names or node.id in ("None", "True", "False"):
            return node
        return ast.copy_location(ast.Call(ast.Name("_name", ast.Load()),
                                          [ast.Name("ctx", ast.Load()), ast.Constant(node.id)], []), node)

    def visit_Attribute(self, node: ast.Attribute):
        value = self.visit(node.value)
        return ast.copy_location(ast.Call(ast.Name("_attr", ast.Load()),
                                          [value, ast.Constant(node.attr)], []), node)

    def visit_Subscript(self, node: ast.Subscript):
        """`a[k]` -> _item(a, k); `a[i:j]` -> _item(a, slice(i, j, None))."""
        key = node.slice
        if isinstance(key, ast.Slice):
            key = ast.Call(ast.Name("slice", ast.Load()), [
                self.visit(part) if part is not None else ast.Constant(None)
                for part in (key.lower, key.upper, key.step)], [])
        else:
            key = self.visit(key)
        return ast.copy_location(ast.Call(ast.Name("_item", ast.Load()), [self.visit(node.value), key], []), node)


_ALLOWED = (ast.Expression, ast.Name, ast.Load, ast.Attribute, ast.Call, ast.Constant, ast.Compare,
            ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp, ast.Dict, ast.List, ast.Tuple,
            ast.Subscript, ast.Slice, ast.keyword, ast.operator, ast.cmpop, ast.boolop, ast.unaryop)


TEST_FUNCTIONS = {f"_test_{name}": test for name, test in _TESTS.items()}


def python_source(source: str, global_names: set[str]) -> tuple[str, set[str]] | None:
    """Python source for the jinja expression, for generated code, and the variables it reads:
    each variable `x` is read from a local `_n_x` (which the caller binds to `_name(ctx, 'x')`),
    `a.get(...)` calls `a.get` directly, and `v.b` of a variable `v` is written in place
    (`_item_or_attribute`) where a missing `b` is an error anyway. None when jinja must
    evaluate the expression."""
    body = _rewrite(source, global_names)
    if body is None:
        return None
    names: set[str] = set()
    body = _Locals(names).visit(body)
    return ast.unparse(body), names


_LOOKUPS = ("_attr", "_item", "_name")


class _Locals(ast.NodeTransformer):
    """Variables read from locals, `a.get(k)` called straight, and `v.b` written in place,
    except where a missing value may be passed without error (`tolerant`): the arguments of
    a call (`given(...)`, `dict(...)`), the operand of a test (`is none`, `is defined`), an
    element of a list, tuple or dict. There `_attr` gives the Undefined the rule gives; in
    place, `v['b']` or `v.b` raises, where using the Undefined would raise too. `a.b.c` holds
    `a.b` in a temporary (not in a comprehension's iterable); `v.b is none` reads `b` in place,
    a missing one `_Undefined` (not none, as the rule's Undefined)."""

    def __init__(self, names: set[str]):
        self.names = names
        self.tolerant = 0
        self.iterable = 0           # inside a comprehension's iterable, where `:=` may not stand

    def visit_comprehension(self, node: ast.comprehension):
        node.target = self.visit(node.target)
        self.iterable += 1
        try:
            node.iter = self.visit(node.iter)
        finally:
            self.iterable -= 1
        node.ifs = [self.visit(test) for test in node.ifs]
        return node

    def _tolerant(self, node: ast.AST) -> ast.AST:
        self.tolerant += 1
        try:
            return self.visit(node)
        finally:
            self.tolerant -= 1

    def visit_Compare(self, node: ast.Compare):
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):     # `x is none`
            node.left = self._tolerant(node.left)
            node.comparators = [self.visit(c) for c in node.comparators]
            left, right = node.left, node.comparators[0]
            if isinstance(right, ast.Constant) and right.value is None and isinstance(left, ast.Call) \
                    and isinstance(left.func, ast.Name) and left.func.id == "_attr" \
                    and isinstance(left.args[0], ast.Name) and left.args[1].value != "get":
                node.left = ast.copy_location(_present_or_not_none(left.args[0].id, left.args[1].value), left)
            return node
        return self.generic_visit(node)

    def visit_List(self, node):
        return self._tolerant_fields(node)

    def visit_Tuple(self, node):
        return self._tolerant_fields(node)

    def visit_Dict(self, node):
        return self._tolerant_fields(node)

    def _tolerant_fields(self, node: ast.AST) -> ast.AST:
        self.tolerant += 1
        try:
            return self.generic_visit(node)
        finally:
            self.tolerant -= 1

    def visit_Call(self, node: ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in _LOOKUPS:
            node = self.generic_visit(node)
        else:
            node.func = self.visit(func)
            node.args = [self._tolerant(arg) for arg in node.args]
            node.keywords = [self._tolerant(kw) for kw in node.keywords]
        func = node.func
        if isinstance(func, ast.Name) and func.id == "_name":          # _name(ctx, 'x') -> _n_x
            name = node.args[1].value
            self.names.add(name)
            return ast.copy_location(ast.Name(f"_n_{name}", ast.Load()), node)
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "_attr" \
                and func.args[1].value == "get":                      # _attr(a, 'get')(k) -> a.get(k)
            node.func = ast.Attribute(func.args[0], "get", ast.Load())
        elif isinstance(func, ast.Name) and func.id == "_attr" and node.args[1].value != "get" and not self.tolerant:
            held = node.args[0]
            if isinstance(held, ast.Name):
                return ast.copy_location(_item_or_attribute(held.id, node.args[1].value), node)
            if not self.iterable:       # `a.b.c`: `a.b` held in a temporary, then read in place
                temp = f"_a{next(_GIVEN_TEMPS)}"
                inline = _item_or_attribute(temp, node.args[1].value)
                inline.test.left.value = ast.NamedExpr(ast.Name(temp, ast.Store()), held)
                return ast.copy_location(inline, node)
        return node


def _item_or_attribute(name: str, attr: str) -> ast.expr:
    """`_attr(x, 'a')` of a variable, in place: `(x['a'] if x.__class__ is dict else x.a)`,
    as generated code reads a dotted name (a call less per use). The same value as `_attr`,
    except that a missing one raises (KeyError, AttributeError) rather than being Undefined."""
    var = ast.Name(name, ast.Load())
    return ast.IfExp(ast.Compare(ast.Attribute(var, "__class__", ast.Load()), [ast.Is()],
                                 [ast.Name("dict", ast.Load())]),
                     ast.Subscript(var, ast.Constant(attr), ast.Load()),
                     ast.Attribute(var, attr, ast.Load()))


def _present_or_not_none(name: str, attr: str) -> ast.expr:
    """`_attr(x, 'a')` of a variable compared with None, in place: `x`'s `a`, or `_Undefined`
    (not None, as the Undefined `_attr` gives) when it has none."""
    var, missing = ast.Name(name, ast.Load()), ast.Name("_Undefined", ast.Load())
    return ast.IfExp(ast.Compare(ast.Attribute(var, "__class__", ast.Load()), [ast.Is()],
                                 [ast.Name("dict", ast.Load())]),
                     ast.Call(ast.Attribute(var, "get", ast.Load()), [ast.Constant(attr), missing], []),
                     ast.Call(ast.Name("getattr", ast.Load()), [var, ast.Constant(attr), missing], []))


def _rewrite(source: str, global_names: set[str]) -> ast.expr | None:
    translated = _translate(source)
    if translated is None:
        return None
    try:
        tree = ast.parse(translated, mode="eval")
    except SyntaxError:
        return None
    if not all(isinstance(node, _ALLOWED) for node in ast.walk(tree)):
        return None
    return _Rewrite(global_names | {f"_test_{name}" for name in _TESTS}).visit(tree).body


def compile_expression(source: str, global_values: dict[str, Any]) -> Callable[[dict], Any] | None:
    """A `f(ctx)` equivalent to the jinja expression, or None when jinja must evaluate it."""
    body = _rewrite(source, set(global_values))
    if body is None:
        return None
    func = ast.Expression(ast.Lambda(ast.arguments([], [ast.arg("ctx")], None, [], [], None, []), body))
    ast.fix_missing_locations(func)
    code = compile(func, f"<expr {source!r}>", "eval")
    return eval(code, {"_attr": _attr, "_item": _item, "_name": _name, **TEST_FUNCTIONS, **global_values})  # noqa: S307 - our own compiled AST


_GIVEN_TEMPS = itertools.count()


def inline_given(code: str) -> str:
    """Generated code with each `given(value, default)` whose default cannot raise (a literal,
    a name) written in place, as
    `(default if (_gN := value) is None or isinstance(_gN, _Undefined) else _gN)`: a Python
    call less each. Not inside a comprehension's iterable, where `:=`
    may not stand. The namespace running the code binds `_Undefined` (INLINE_GLOBALS)."""
    if "given(" not in code:
        return code
    tree = _InlineGiven().visit(ast.parse(code, mode="eval"))
    return ast.unparse(ast.fix_missing_locations(tree))


INLINE_GLOBALS = {"_Undefined": jinja2.Undefined}


def renamed(code: str, names: dict[str, str]) -> str:
    """Python expression `code` with each read of a variable `old` of `names` reading
    `names[old]` (a name, or an expression) instead."""
    replacements = {old: ast.parse(new, mode="eval").body for old, new in names.items()}

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return replacements.get(node.id, node) if isinstance(node.ctx, ast.Load) else node
    tree = Rename().visit(ast.parse(code, mode="eval"))
    return ast.unparse(ast.fix_missing_locations(tree))


def _cannot_raise(node: ast.expr) -> bool:
    """A literal, a name, or a list, tuple or dict of those (a default of `given`)."""
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(_cannot_raise(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _cannot_raise(k) and isinstance(k, ast.Constant) for k in node.keys) \
            and all(_cannot_raise(v) for v in node.values)
    return False


class _InlineGiven(ast.NodeTransformer):
    def visit_comprehension(self, node: ast.comprehension):
        node.target = self.visit(node.target)
        node.ifs = [self.visit(test) for test in node.ifs]
        return node                                 # node.iter left as it is

    def visit_Call(self, node: ast.Call):
        node = self.generic_visit(node)
        if not (isinstance(node.func, ast.Name) and node.func.id == "given" and len(node.args) == 2
                and not node.keywords and _cannot_raise(node.args[1])):
            return node         # (`given` evaluates its default even when it does not give it)
        value, default = node.args
        temp = f"_g{next(_GIVEN_TEMPS)}"
        held = ast.NamedExpr(ast.Name(temp, ast.Store()), value)
        missing = ast.BoolOp(ast.Or(), [
            ast.Compare(held, [ast.Is()], [ast.Constant(None)]),
            ast.Call(ast.Name("isinstance", ast.Load()), [ast.Name(temp, ast.Load()),
                                                          ast.Name("_Undefined", ast.Load())], [])])
        return ast.copy_location(ast.IfExp(missing, default, ast.Name(temp, ast.Load())), node)
