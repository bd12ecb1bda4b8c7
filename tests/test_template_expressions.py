"""One meaning for a template expression: the generated code (llmsim.render.jsoncodegen,
jsonvaluegen, stepcodegen, pyexpr) and the reference renderer (jinja with the lookup rule,
`pyexpr.Environment`) give identical bytes, or both fail, for arbitrary expressions of the
kinds templates use over arbitrary contexts: nested dicts and lists, objects, keys named like
dict methods (`items`, `keys`, `get`, `values`), missing keys and variables, None."""
from __future__ import annotations

import logging

import jinja2
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsim.errors import ConfigError, ServerError
from llmsim.render.jsonbytes import dumps
from llmsim.render.templates import Compiler, Template, TemplateSet

VARIABLES = ("req", "plan", "items", "x")       # each may be missing from the context
KEYS = ("items", "keys", "get", "values", "a", "text")
FILTERS = ("list", "tojson")


class Obj:
    """An object (not a mapping) of the context: `o.b` is its attribute."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)

    def __repr__(self) -> str:
        return f"Obj({self.__dict__!r})"


# -- contexts ---------------------------------------------------------------------------------
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["", "a", "items"]))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(KEYS), inner, min_size=1, max_size=5),
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(KEYS[3:]), inner, max_size=3).map(lambda d: Obj(**d))),
    max_leaves=10)
# every variable, less a few (a missing variable is undefined)
contexts = st.tuples(st.fixed_dictionaries({name: values for name in VARIABLES}),
                     st.sets(st.sampled_from(VARIABLES), max_size=2)).map(
    lambda p: {k: v for k, v in p[0].items() if k not in p[1]})


# -- expressions (jinja source) ---------------------------------------------------------------
literals = st.one_of(st.sampled_from(["none", "true", "false", "1.5", "'a'", "'items'", "[]", "[1, 'a']"]),
                     st.integers(-2, 3).map(str))
OPERATORS = ("==", "!=", "in", "not in", "and", "or", "<", ">=", "+", "-", "*", "/", "//", "%", "**", "~")


def _compound(inner):
    paren = inner.map(lambda e: f"({e})")
    key = st.sampled_from(KEYS)
    lookups = st.one_of(
        st.tuples(paren, key).map(lambda p: f"{p[0]}.{p[1]}"),
        st.tuples(paren, key).map(lambda p: f"{p[0]}['{p[1]}']"),
        st.tuples(paren, st.integers(-2, 1)).map(lambda p: f"{p[0]}[{p[1]}]"),
        st.tuples(paren, key, st.one_of(st.none(), literals)).map(
            lambda p: f"{p[0]}.get('{p[1]}')" if p[2] is None else f"{p[0]}.get('{p[1]}', {p[2]})"))
    tests = st.one_of(
        st.tuples(paren, st.sampled_from(["none", "not none", "defined", "not defined", "string"])).map(
            lambda p: f"{p[0]} is {p[1]}"),
        st.tuples(inner, inner).map(lambda p: f"given({p[0]}, {p[1]})"),
        st.tuples(paren, paren, paren).map(lambda p: f"{p[0]} if {p[1]} else {p[2]}"))
    return st.one_of(
        lookups, tests,
        st.tuples(paren, st.sampled_from(OPERATORS), paren).map(" ".join),
        st.tuples(st.sampled_from(["not ", "-"]), paren).map("".join),
        st.tuples(paren, st.sampled_from(FILTERS)).map(lambda p: f"{p[0]} | {p[1]}"),
        st.tuples(inner, inner).map(lambda p: f"[{p[0]}, {p[1]}]"),
    )


# names and dotted names as templates write them (`req.items`, `plan.a.text`), and compounds
dotted = st.tuples(st.sampled_from(VARIABLES), st.lists(st.sampled_from(KEYS), max_size=2)).map(
    lambda p: ".".join([p[0], *p[1]]))
expressions = st.recursive(st.one_of(dotted, literals), _compound, max_leaves=6)


# -- the two renderers ----------------------------------------------------------------------
FAILED = "fails"


def _reference(compiler: Compiler, source: str, ctx: dict):
    """jinja with the lookup rule: the value's JSON bytes, or FAILED."""
    try:
        value = compiler.env.compile_expression(source, undefined_to_none=False)(**ctx)
        if isinstance(value, jinja2.Undefined):
            return FAILED
        return dumps({"v": value})
    except Exception:       # (an error of the template: undefined, a type error, 1 // 0 ...)
        return FAILED


def _outcome(render):
    try:
        return render()
    except ServerError:     # the guarded code: the template error, logged
        return FAILED
    except Exception:       # unguarded code: what it raised
        return FAILED


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(scope="module")
def compilers():
    """An unguarded compiler (its generated code alone answers) and a guarded one (as served:
    a failure of the code is logged and raised), and a handler catching what they log."""
    unguarded, guarded = Compiler({}, {}), Compiler({}, {})
    unguarded.codegen.GUARDED = False
    handler, logger = _Records(), logging.getLogger("llmsim.templates")
    logger.addHandler(handler)
    yield unguarded, guarded, handler
    logger.removeHandler(handler)


@settings(max_examples=400, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(source=expressions, ctx=contexts)
def test_generated_code_and_the_reference_give_the_same_bytes(compilers, source, ctx):
    unguarded, guarded, handler = compilers
    node = {"v": "{{ " + source + " }}"}
    expected = _reference(unguarded, source, ctx)
    where = f"<{source}>"
    try:
        body = unguarded.json_writer(node, where, once=True)         # jsonvaluegen
        event = unguarded.json_writer(node, where)                   # jsoncodegen
        value = unguarded.fast(node["v"], where).fast                 # pyexpr in a function
        stream = Template("t", None, None, guarded.steps([{"event": "e", "data": node}], where))
    except ConfigError:         # a constant part fails (`(none).a`): start-up refuses it
        assert expected == FAILED
        return
    handler.records.clear()
    assert _outcome(lambda: body({**ctx, "__memo": {}})) == expected, ("body", source, ctx)
    assert _outcome(lambda: event({**ctx, "__memo": {}})) == expected, ("event", source, ctx)
    assert _outcome(lambda: dumps({"v": value(dict(ctx))})) == expected, ("value", source, ctx)
    frames = _outcome(lambda: [frame for _, frame in stream.frames(**ctx)])
    assert frames == FAILED if expected == FAILED else frames == [b"event: e\ndata: " + expected + b"\n\n"]
    # the guarded code never disagreed with the reference, and logged only a failure
    assert not [r for r in handler.records if "compiler bug" in r.getMessage()]
    assert bool(handler.records) == (expected == FAILED)


# -- the lookup rule, as a template author sees it ------------------------------------------
@pytest.fixture
def compile_one(tmp_path):
    def compile_text(text: str) -> Template:
        (tmp_path / "t.yaml").write_text(text)
        return TemplateSet(tmp_path)["t"]
    return compile_text


def test_a_key_named_like_a_dict_method_is_the_key(compile_one):
    t = compile_one('body: {items: "{{ req.items }}", keys: "{{ req[\'keys\'] }}", text: "<{{ req.values }}>"}')
    req = {"items": [1], "keys": "k", "values": "v"}
    assert orjson.loads(t.body_json(req=req)) == {"items": [1], "keys": "k", "text": "<v>"}
    assert t.body(req=req) == {"items": [1], "keys": "k", "text": "<v>"}


def test_get_on_a_dict_is_its_method_and_a_key_named_get_is_read_by_subscript(compile_one):
    t = compile_one("""body: {a: "{{ req.get('a', 2) }}", get: "{{ req['get'] }}", b: "{{ given(req.get('b'), 3) }}"}""")
    assert orjson.loads(t.body_json(req={"a": 1, "get": "g"})) == {"a": 1, "get": "g", "b": 3}


def test_a_missing_key_is_undefined_for_given_and_tests_and_an_error_written_out(compile_one):
    t = compile_one('body: {d: "{{ req.items is defined }}", n: "{{ req.items is none }}", '
                    'g: "{{ given(req.items, 0) }}"}')
    assert orjson.loads(t.body_json(req={})) == {"d": False, "n": False, "g": 0}
    written = compile_one('body: {v: "{{ req.items }}"}')
    with pytest.raises(ServerError):
        written.body_json(req={})


def test_a_failing_expression_logs_its_template_and_path(compile_one, caplog):
    """A template bug met at render time: the server's log names the template file and the
    path in it, and the request gets a server error (no silent fallback)."""
    t = compile_one("""
stream:
  - event: first
    data: {n: "{{ plan.n }}"}
  - event: second
    data: {nested: {v: "{{ plan.n + plan.text }}"}}
""")
    frames = t.frames(plan={"n": 1, "text": "a"})
    assert next(frames)[1] == b'event: first\ndata: {"n":1}\n\n'
    with caplog.at_level(logging.ERROR, logger="llmsim.templates"), pytest.raises(ServerError):
        next(frames)
    [record] = [r for r in caplog.records if r.name == "llmsim.templates"]
    assert "t.yaml" in record.getMessage() and "stream[1].data.nested.v" in record.getMessage()
    assert "plan.n + plan.text" in record.getMessage()
