"""One meaning for a template expression: the generated code (llmsim.render.jsoncodegen,
jsonvaluegen, stepcodegen, pyexpr), the closures of `templates.Compiler` and the reference
renderer (jinja with the lookup rule, `pyexpr.Environment`) give identical bytes, or all fail,
for arbitrary expressions of the kinds templates use over arbitrary contexts: nested dicts and
lists, objects, keys named like dict methods (`items`, `keys`, `get`, `values`), missing keys
and variables, None; and for arbitrary `$for` loops around them, making lists and (with
`$key`) mappings, with values that may be `omit`."""
from __future__ import annotations

import logging

import jinja2
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsim.errors import ConfigError, ServerError
from llmsim.render.jsonbytes import dumps
from llmsim.render.templates import OMIT, Compiler, Template, TemplateSet

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


# -- values (YAML nodes): expressions, values that may be omitted, and loops -----------------
LOOP_NAMES = ("x", "items")     # a loop's name shadows the variable of that name


def _whole(source: str) -> str:
    return "{{ " + source + " }}"


def _mostly(common, rare):
    """`common` three times in four, else `rare`."""
    return st.integers(0, 3).flatmap(lambda i: rare if i == 0 else common)


# most often something that renders, so that loops make entries (`NAME`: the name of the
# loop around it): the item, a variable, or a value omitted for some items
SIMPLE = st.sampled_from(["{{ NAME }}", "{{ req }}", "{{ x }}", "{{ omit if NAME is string else NAME }}",
                          "{{ omit if NAME == 'a' else 2 }}"])
leaves = _mostly(SIMPLE, st.one_of(expressions.map(_whole), st.tuples(expressions, expressions).map(
    lambda p: _whole(f"omit if ({p[0]}) else ({p[1]})"))))
# a loop's source: most often something to iterate (of strings, or not; equal items too)
ITERABLES = st.sampled_from(["[]", "['a', 'items', 'a']", "[1, none]", "['a', 'b']", "x", "req.items"])
sources = _mostly(ITERABLES, st.one_of(dotted, expressions))
# a mapping's key (`NAME`: the loop's name): most often the item, else a value (a string, or
# an error), or a text template (always a string)
NAMED = st.sampled_from(["{{ NAME }}", "k{{ NAME }}", "{{ NAME ~ '!' }}", "{{ NAME.text }}"])
entry_keys = _mostly(NAMED, st.one_of(expressions.map(_whole), dotted.map(lambda d: "k{{ " + d + " }}"),
                                     expressions.map(lambda e: _whole(e) + "!")))


def _named(node, name: str):
    """`node` with `NAME` (where no loop inside it has named it already) read as `name`."""
    if isinstance(node, str):
        return node.replace("NAME", name)
    return {k: _named(v, name) for k, v in node.items()}


def _loops(inner):
    def loop(name, source, key, body):
        node = {"$for": f"{name} in {source}", "$do": body}
        return _named(node if key is None else {**node, "$key": key}, name)
    return st.builds(loop, st.sampled_from(LOOP_NAMES), sources, st.one_of(st.none(), entry_keys, entry_keys), inner)


nodes = st.one_of(expressions.map(_whole), _loops(st.recursive(leaves, _loops, max_leaves=2)))


# -- the two renderers ----------------------------------------------------------------------
FAILED = "fails"


def _rendered(compiler: Compiler, node, ctx: dict):
    """The value of `node` as the language reference (docs/templates.md) defines it, each
    expression and text template evaluated by jinja with the lookup rule."""
    if isinstance(node, str):
        if node.startswith("{{ ") and node.endswith(" }}") and "{{" not in node[2:]:
            value = compiler.env.compile_expression(node[3:-3], undefined_to_none=False)(**ctx)
            if isinstance(value, jinja2.Undefined):
                raise ValueError("undefined")
            return value
        return compiler.env.from_string(node).render(**ctx)
    if "$for" not in node:
        return {k: v for k, v in ((k, _rendered(compiler, v, ctx)) for k, v in node.items()) if v is not OMIT}
    name, source = node["$for"].split(" in ", 1)
    entries = []
    for item in _rendered(compiler, _whole(source), ctx):
        inner = {**ctx, name: item}
        value = _rendered(compiler, node["$do"], inner)
        if value is OMIT:                   # no entry (and no key rendered)
            continue
        if "$key" not in node:
            entries.append(value)
            continue
        key = _rendered(compiler, node["$key"], inner)
        if not isinstance(key, str):
            raise TypeError("a key must be a string")
        entries.append((key, value))
    return dict(entries) if "$key" in node else entries


def _reference(compiler: Compiler, node, ctx: dict):
    """The reference's JSON bytes for `node`, or FAILED."""
    try:
        return dumps(_rendered(compiler, node, ctx))
    except Exception:       # (an error of the template: undefined, a type error, 1 // 0 ...)
        return FAILED


def _strings(node) -> list[str]:
    """Every expression and text template of a node (a loop's source as `{{ source }}`)."""
    if isinstance(node, str):
        return [node]
    if not isinstance(node, dict):
        return []
    found = [s for key, value in node.items() if key != "$for" for s in _strings(value)]
    return found + ([_whole(node["$for"].split(" in ", 1)[1])] if "$for" in node else [])


def _refused(compiler: Compiler, text: str) -> bool:
    try:
        compiler.json_writer({"v": text}, "<alone>")
    except ConfigError:
        return True
    return False


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
@given(v=nodes, ctx=contexts)
def test_generated_code_and_the_reference_give_the_same_bytes(compilers, v, ctx):
    unguarded, guarded, handler = compilers
    node = {"v": v}
    expected = _reference(unguarded, node, ctx)
    where = f"<{v}>"
    try:
        body = unguarded.json_writer(node, where, once=True)         # jsonvaluegen
        event = unguarded.json_writer(node, where)                   # jsoncodegen
        closure = unguarded.json.value(node, where)                  # the closures (jsonwriter)
        value = unguarded.fast(node["v"], where).fast                 # pyexpr in a function
        stream = Template("t", None, None, guarded.steps([{"event": "e", "data": node}], where))
    except ConfigError:         # a constant part fails (`(none).a`): start-up refuses it
        if isinstance(v, str):
            assert expected == FAILED
        else:                   # ... wherever it is, even in a loop that never runs
            assert any(_refused(unguarded, text) for text in _strings(v))
        return
    handler.records.clear()
    assert _outcome(lambda: body({**ctx, "__memo": {}})) == expected, ("body", v, ctx)
    assert _outcome(lambda: event({**ctx, "__memo": {}})) == expected, ("event", v, ctx)
    assert _outcome(lambda: closure(ctx)) == expected, ("closure", v, ctx)
    assert _outcome(lambda: dumps({k: x for k, x in {"v": value(dict(ctx))}.items() if x is not OMIT})) \
        == expected, ("value", v, ctx)
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


def test_an_object_given_omit_by_with_leaves_its_key_out(compile_one, caplog):
    """`$with: {n: "{{ omit }}"}` (the WebSocket error event with no sequence number): the
    object's entry reading `n` is left out, in a body and in a stream's event, by the
    generated code itself (no compiler bug logged, no server error)."""
    t = compile_one("""
objects:
  event: {kind: "{{ kind }}", n: "{{ n }}"}
body: {$object: event, $with: {kind: e, n: "{{ omit }}"}}
stream:
  - event: e
    data: {$object: event, $with: {kind: "{{ plan.kind }}", n: "{{ omit }}"}}
""")
    with caplog.at_level(logging.ERROR, logger="llmsim.templates"):
        assert orjson.loads(t.body_json()) == {"kind": "e"}
        assert [frame for _, frame in t.frames(plan={"kind": "k"})] == [b'event: e\ndata: {"kind":"k"}\n\n']
    assert not caplog.records


# -- a mapping from a loop, as a template author sees it -------------------------------------
def test_a_loop_with_a_key_makes_a_mapping_and_an_omitted_value_leaves_no_key(compile_one):
    t = compile_one("""
body:
  models:
    $for: "m in rows"
    $key: "{{ m.name }}"
    $do: {requests: "{{ m.n }}", busy: "{{ omit if m.n < 2 else true }}"}
  names: {$for: "m in rows", $key: "{{ m.name }}", $do: "{{ omit if m.n < 2 else m.n }}"}
""")
    rows = [{"name": "gpt-4o", "n": 3}, {"name": "o3", "n": 1}]
    expected = {"models": {"gpt-4o": {"requests": 3, "busy": True}, "o3": {"requests": 1}}, "names": {"gpt-4o": 3}}
    assert t.body_json(rows=rows) == orjson.dumps(expected)
    assert t.body(rows=rows) == expected


def test_a_key_that_is_not_a_string_is_a_template_error(compile_one, caplog):
    t = compile_one('body: {by_n: {$for: "m in rows", $key: "{{ m.n }}", $do: "{{ m.name }}"}}')
    with caplog.at_level(logging.ERROR, logger="llmsim.templates"), pytest.raises(ServerError):
        t.body_json(rows=[{"name": "o3", "n": 1}])
    assert "body.by_n.$key" in caplog.text and "must be a string" in caplog.text


def test_a_key_outside_a_loop_stops_start_up(compile_one):
    with pytest.raises(ConfigError, match=r"body\.m: \$key and \$do belong to a \$for"):
        compile_one('body: {m: {$key: "{{ x }}", $do: 1}}')
