"""Run simple jinja2 expressions as native Python closures.

jinja2 builds a fresh context for every evaluation of a compiled expression (~10 us), which
dominated rendering a response object. Most template expressions use only the part of jinja's
syntax that Python shares (names, attributes, calls, literals, comparisons, `and`/`or`/`not`,
`x if c else y`, `is none`). Those are translated once into a Python lambda with jinja's
attribute semantics (attribute first, then item). Anything else (filters, `~`, other tests
such as `is defined`) returns None and the caller keeps using jinja.
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
_UNSUPPORTED_OPS = {"|", "~"}
# jinja tests with a Python twin: `x is string` -> _test_string(x); `is not` negates.
_TESTS = {"string": lambda value: isinstance(value, str),
          "defined": lambda value: not isinstance(value, jinja2.Undefined)}


def _attr(obj: Any, name: str) -> Any:
    """jinja's `obj.name`: the attribute if there is one, else the item."""
    try:
        return getattr(obj, name)
    except AttributeError:
        try:
            return obj[name]
        except (KeyError, TypeError, IndexError):
            raise AttributeError(f"{type(obj).__name__} has no attribute or key {name!r}") from None


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


class _Rewrite(ast.NodeTransformer):
    """Names -> _name(ctx, 'name') (globals stay globals); `a.b` -> _attr(a, 'b')."""

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
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name):
        if node.id in self.global_names or node.id in ("None", "True", "False"):
            return node
        return ast.copy_location(ast.Call(ast.Name("_name", ast.Load()),
                                          [ast.Name("ctx", ast.Load()), ast.Constant(node.id)], []), node)

    def visit_Attribute(self, node: ast.Attribute):
        value = self.visit(node.value)
        return ast.copy_location(ast.Call(ast.Name("_attr", ast.Load()),
                                          [value, ast.Constant(node.attr)], []), node)


_ALLOWED = (ast.Expression, ast.Name, ast.Load, ast.Attribute, ast.Call, ast.Constant, ast.Compare,
            ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp, ast.Dict, ast.List, ast.Tuple,
            ast.Subscript, ast.Slice, ast.keyword, ast.operator, ast.cmpop, ast.boolop, ast.unaryop)


TEST_FUNCTIONS = {f"_test_{name}": test for name, test in _TESTS.items()}


def python_source(source: str, global_names: set[str]) -> tuple[str, set[str]] | None:
    """Python source for the jinja expression, for generated code, and the variables it reads:
    each variable `x` is read from a local `_n_x` (which the caller binds to `_name(ctx, 'x')`),
    and `a.get(...)` calls `a.get` directly. None when jinja must evaluate the expression.

    Where `a.get` is no attribute (jinja would then look up the item "get"), the code raises:
    generated code falls back to the exact path then.
    """
    body = _rewrite(source, global_names)
    if body is None:
        return None
    names: set[str] = set()
    body = _Locals(names).visit(body)
    return ast.unparse(body), names


class _Locals(ast.NodeTransformer):
    def __init__(self, names: set[str]):
        self.names = names

    def visit_Call(self, node: ast.Call):
        node = self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id == "_name":          # _name(ctx, 'x') -> _n_x
            name = node.args[1].value
            self.names.add(name)
            return ast.copy_location(ast.Name(f"_n_{name}", ast.Load()), node)
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "_attr" \
                and func.args[1].value == "get":                      # _attr(a, 'get')(k) -> a.get(k)
            node.func = ast.Attribute(func.args[0], "get", ast.Load())
        elif isinstance(func, ast.Name) and func.id == "_attr" and isinstance(node.args[0], ast.Name) \
                and node.args[1].value != "get":                    # (a call of it: just above)
            return ast.copy_location(_item_or_attribute(node.args[0].id, node.args[1].value), node)
        return node


def _item_or_attribute(name: str, attr: str) -> ast.expr:
    """`_attr(x, 'a')` of a variable, in place: `(x['a'] if x.__class__ is dict else x.a)`,
    as generated code reads a dotted name (a call less per use). Where jinja would find an
    item of some other mapping, this raises, and generated code falls back to the exact path."""
    var = ast.Name(name, ast.Load())
    return ast.IfExp(ast.Compare(ast.Attribute(var, "__class__", ast.Load()), [ast.Is()],
                                 [ast.Name("dict", ast.Load())]),
                     ast.Subscript(var, ast.Constant(attr), ast.Load()),
                     ast.Attribute(var, attr, ast.Load()))


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
    return eval(code, {"_attr": _attr, "_name": _name, **TEST_FUNCTIONS, **global_values})  # noqa: S307 - our own compiled AST


_GIVEN_TEMPS = itertools.count()


def inline_given(code: str) -> str:
    """Generated code with each `given(value, default)` call written in place, as
    `(default if (_gN := value) is None or isinstance(_gN, _Undefined) else _gN)`: a Python
    call less each (~1k instructions). Not inside a comprehension's iterable, where `:=`
    may not stand. The namespace running the code binds `_Undefined` (INLINE_GLOBALS)."""
    if "given(" not in code:
        return code
    tree = _InlineGiven().visit(ast.parse(code, mode="eval"))
    return ast.unparse(ast.fix_missing_locations(tree))


INLINE_GLOBALS = {"_Undefined": jinja2.Undefined}


def renamed(code: str, old: str, new: str) -> str:
    """Python expression `code` with each read of the variable `old` reading `new` (a name,
    or an expression) instead."""
    replacement = ast.parse(new, mode="eval").body

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return replacement if node.id == old else node
    tree = Rename().visit(ast.parse(code, mode="eval"))
    return ast.unparse(ast.fix_missing_locations(tree))


class _InlineGiven(ast.NodeTransformer):
    def visit_comprehension(self, node: ast.comprehension):
        node.target = self.visit(node.target)
        node.ifs = [self.visit(test) for test in node.ifs]
        return node                                 # node.iter left as it is

    def visit_Call(self, node: ast.Call):
        node = self.generic_visit(node)
        if not (isinstance(node.func, ast.Name) and node.func.id == "given" and len(node.args) == 2
                and not node.keywords):
            return node
        value, default = node.args
        temp = f"_g{next(_GIVEN_TEMPS)}"
        held = ast.NamedExpr(ast.Name(temp, ast.Store()), value)
        missing = ast.BoolOp(ast.Or(), [
            ast.Compare(held, [ast.Is()], [ast.Constant(None)]),
            ast.Call(ast.Name("isinstance", ast.Load()), [ast.Name(temp, ast.Load()),
                                                          ast.Name("_Undefined", ast.Load())], [])])
        return ast.copy_location(ast.IfExp(missing, default, ast.Name(temp, ast.Load())), node)
