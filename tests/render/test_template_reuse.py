"""Generated code reads a chain such as `plan.usage.input_tokens` once and reuses it
(llmsim.render.reuse). Differential tests: what the rewritten code gives (bytes, values,
errors) is exactly what the code it rewrites gives and what the interpreted templates
serialise to, for the real templates and for the edge cases of reuse: a chain first read
under a condition, inside a loop or a short-circuit; None or missing links; dicts and objects."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import orjson
import pytest

from llmsim.clock import FakeClock
from llmsim.render import jsoncodegen, sse
from llmsim.render.jsonbytes import dumps
from llmsim.render.jsoncodegen import JsonCodegen
from llmsim.render.reuse import reuse
from llmsim.render.templates import TemplateSet
from llmsim.settings import Settings
from llmsim.sim import chat_plan
from llmsim.sim import responses_plan as planning
from llmsim.simulator import Simulator
from tests.render.test_template_json import CHATS, RESPONSES


class Counted:
    """An object whose every attribute read is counted (a read the rewrite hoisted out of a
    condition, or did not reuse, shows)."""

    def __init__(self, reads: list, **values):
        self.__dict__["_reads"], self.__dict__["_values"] = reads, values

    def __getattr__(self, name):
        self._reads.append(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None


TEMPS = itertools.count()


def lookup(var: str, *names: str) -> str:
    """The code generated code reads `var.a.b` with (pyexpr's form)."""
    code = var
    for name in names:
        if code.isidentifier():
            code = f"({code}[{name!r}] if {code}.__class__ is dict else {code}.{name})"
        else:
            temp = f"_a{next(TEMPS)}"
            code = f"({temp}[{name!r}] if ({temp} := {code}).__class__ is dict else {temp}.{name})"
    return code


U, X, Y = lookup("_n_p", "u"), lookup("_n_p", "u", "x"), lookup("_n_p", "u", "y")
EXPRESSIONS = {
    "straight": f"({X}, {Y}, {U}, {X})",
    "first under a condition, then outside": f"(({X} if _n_flag else 0), {Y}, {X})",
    "first in one branch, then in the other": f"({X} if _n_flag else {Y}, {U})",
    "first in a short-circuit": f"(_n_flag and {X}, {X}, _n_flag or {Y}, {Y})",
    "first in a comprehension": f"([{X} + i for i in _n_items], {X}, [{Y} for i in _n_items if {Y}])",
    "in a comprehension's iterable": f"([i for i in [{X}, {X}]], {X})",
    "first in a chained comparison's tail": f"(0 < _n_n < {X}, {X}, {X} < {Y})",
    "dict keys and values, in order": f"{{{Y}: {X}, 'b': {X}, {X}: {Y}}}",
    "a temporary copied": f"((_v1 := _n_n) + 1, _v1 * 2, {X})",
    "a temporary bound in a comprehension's condition": "[_v5 + i for i in _n_items if (_v5 := _n_n)]",
    "a copy of a copy": "((_v6 := (_wv7 := _n_n)) + 1, _v6, _wv7, (_v8 := _wv7) * 3, _v8)",
    "a temporary bound twice": f"((_a1['x'] if (_a1 := {U}).__class__ is dict else _a1.x), "
                               f"(_a1['y'] if (_a1 := {U}).__class__ is dict else _a1.y), {X})",
}


def evaluate(code: str, env: dict):
    try:
        return "value", eval(code, {}, dict(env))     # noqa: S307 - our own test code
    except Exception as exc:
        return "error", type(exc)


def contexts(reads: list):
    usage = {"x": 2, "y": 5}
    for p in ({"u": usage}, Counted(reads, u=usage), Counted(reads, u=Counted(reads, x=2, y=5)),
              {"u": None}, {"u": {}}, {}, Counted(reads), {"u": Counted(reads, x=None, y=3)}):
        for flag in (True, False, 0, None):
            for items in ([], [1, 2, 3]):
                yield {"_n_p": p, "_n_flag": flag, "_n_items": items, "_n_n": 1}


@pytest.mark.parametrize("code", EXPRESSIONS.values(), ids=EXPRESSIONS.keys())
def test_a_rewritten_expression_gives_the_same_value_or_error_with_no_more_reads(code):
    rewritten = reuse(code)
    for env in contexts(reads := []):
        reads.clear()
        expected = evaluate(code, env)
        original_reads = list(reads)
        reads.clear()
        assert evaluate(rewritten, env) == expected, (rewritten, env)
        # never a read the original does not make (none hoisted out of a condition)
        assert all(reads.count(name) <= original_reads.count(name) for name in reads), (rewritten, env)


def test_a_chain_read_many_times_is_read_once_and_the_class_tested_once():
    code, reads = EXPRESSIONS["straight"], []
    p = Counted(reads, u=Counted(reads, x=1, y=2))
    expected = evaluate(code, {"_n_p": p})
    assert reads == ["u", "x", "u", "y", "u", "u", "x"]
    reads.clear()
    assert evaluate(reuse(code), {"_n_p": p}) == expected
    assert reads == ["u", "x", "y"]
    assert reuse(code).count(".__class__ is dict") == 2         # one per variable read


def test_a_read_under_a_condition_is_not_reused_where_the_condition_may_not_have_held():
    rewritten = reuse(EXPRESSIONS["first in one branch, then in the other"])
    assert rewritten.count("['u']") == 3     # in each branch and after them: never hoisted
    reads: list = []
    p = Counted(reads, u={"x": 1, "y": 2})
    assert evaluate(rewritten, {"_n_p": p, "_n_flag": False}) == ("value", (2, {"x": 1, "y": 2}))
    assert reads == ["u", "u"]


class Pieces:
    @property
    def timed(self):            # a new iterator each read, as a plan's `timed_pieces`
        return zip("ab", (1, 2))


def test_what_a_loop_iterates_is_read_afresh_for_each_loop():
    timed = lookup("_n_p", "timed")
    code = f"([p for p, _ in {timed}], [t for _, t in {timed}], bool({timed}), bool({timed}))"
    rewritten = reuse(code)
    assert "_r" in rewritten        # the two tests share one read, the loops read their own
    assert evaluate(rewritten, {"_n_p": Pieces()}) == ("value", (["a", "b"], [1, 2], True, True))


# -- templates: each byte of the generated writers is the serialised value ------------------

@pytest.fixture(scope="module")
def simulator():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JsonCodegen, "GUARDED", False)
        return Simulator.load(Settings(profile="instant", seed=7, target_tokens=12), FakeClock())


@pytest.mark.parametrize("body", CHATS + RESPONSES, ids=lambda b: b["model"] + "-" + str(len(b)))
@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_the_templates_writers_give_the_serialised_values(simulator, body, stream):
    if "messages" in body:
        template, plan = simulator.templates["chat"], chat_plan.plan_chat(body, simulator.context(body["model"]))
    else:
        template = simulator.templates["responses"]
        plan = planning.plan_response(body, simulator.context(body["model"]), [])
    body = {**body, "stream": stream}
    if not stream:
        assert template.body_json(plan=plan, req=body) == dumps(template.body(plan=plan, req=body))
        return
    events = list(template.events(plan=plan, req=body))
    assert events and all(e.json == orjson.dumps(e.data) for e in events if not e.raw)
    assert [f for _, f in template.frames(plan=plan, req=body)] == [f for _, f in sse.framed(events)]


EDGE = """
objects:
  usage: {x: "{{ p.u.x }}", y: "{{ p.u.y }}"}
body:
  first_under_a_condition: {$if: "{{ flag }}", $then: "{{ p.u.x }}", $else: 0}
  then_outside: "{{ p.u.x }}"
  sum: "{{ p.u.x + p.u.y }}"
  in_a_loop: {$for: "i in items", $do: {i: "{{ i }}", x: "{{ p.u.x }}", y: "{{ p.u.y }}"}}
  object: {$object: usage}
  maybe_none: "{{ given(p.v, 'none') }}"
  tested: "{{ p.v is none }}"
stream:
  - event: head
    data: {x: "{{ p.u.x }}", y: "{{ p.u.y }}", seq: "{{ seq }}"}
  - for: "i in items"
    steps:
      - if: "{{ flag }}"
        steps: [{event: flagged, data: {x: "{{ p.u.x }}", i: "{{ i }}"}}]
      - event: each
        data: {x: "{{ p.u.x }}", u: {$object: usage}, i: "{{ i }}", y: "{{ p.u.y + i }}", seq: "{{ seq }}"}
  - event: tail
    data: {y: "{{ p.u.y }}", x: "{{ p.u.x }}"}
"""


@pytest.fixture(scope="module", params=["unguarded", "guarded"])
def edge(request, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JsonCodegen, "GUARDED", request.param == "guarded")
        path = tmp_path_factory.mktemp("edge")
        (path / "t.yaml").write_text(EDGE)
        made = TemplateSet(path)["t"]
        patch.setattr(jsoncodegen, "reuse", lambda code: code)     # the code as generated before
        (path / "t.yaml").write_text(EDGE)
        plain = TemplateSet(path)["t"]
    return made, plain


def edge_contexts():
    for u in ({"x": 1, "y": 2}, SimpleNamespace(x=3, y=4), {"x": 0, "y": -1}):
        for p in ({"u": u, "v": None}, SimpleNamespace(u=u, v=7), {"u": u}):
            for flag in (True, False):
                for items in ([], [1, 2], range(3)):
                    yield {"p": p, "flag": flag, "items": list(items)}


def outcome(render):
    try:
        return "value", render()
    except Exception as exc:
        return "error", type(exc).__name__


def test_the_edge_cases_give_the_serialised_values_and_what_the_code_without_reuse_gives(edge):
    made, plain = edge
    for ctx in edge_contexts():
        body = made.body_json(**ctx)
        assert body == dumps(made.body(**ctx)) == plain.body_json(**ctx), ctx
        frames = [f for _, f in made.frames(**ctx)]
        assert frames == [f for _, f in sse.framed(made.events(**ctx))] == [f for _, f in plain.frames(**ctx)], ctx
        assert all(e.json == orjson.dumps(e.data) for e in made.events(**ctx))


@pytest.mark.parametrize("ctx", [{"p": {"u": None}}, {"p": {}}, {"p": SimpleNamespace()},
                                 {"p": SimpleNamespace(u=None)}, {}],
                         ids=["None link", "missing key", "missing attribute", "None attribute", "missing variable"])
def test_a_missing_or_none_link_fails_as_the_code_without_reuse_does(edge, ctx):
    made, plain = edge
    ctx = {"flag": True, "items": [1], **ctx}
    assert outcome(lambda: made.body_json(**ctx)) == outcome(lambda: plain.body_json(**ctx))
    assert outcome(lambda: list(made.frames(**ctx))) == outcome(lambda: list(plain.frames(**ctx)))
    assert outcome(lambda: made.body_json(**ctx))[0] == "error"


def test_a_streams_sequence_number_is_written_from_the_table_and_past_it(tmp_path, monkeypatch):
    monkeypatch.setattr(JsonCodegen, "GUARDED", False)
    (tmp_path / "t.yaml").write_text(
        'stream:\n  - {for: "i in items", steps: [{event: e, data: {n: "{{ seq }}", i: "{{ i }}"}}]}\n')
    template, items = TemplateSet(tmp_path)["t"], list(range(4100))       # (the table holds 0-4095)
    frames = [f for _, f in template.frames(items=items)]
    assert frames == [f for _, f in sse.framed(template.events(items=items))]
    assert [orjson.loads(f.split(b"data: ", 1)[1])["n"] for f in frames] == items
