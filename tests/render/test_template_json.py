"""Templates are compiled twice: to values and straight to JSON bytes. Whatever a template
renders, the bytes on the wire are exactly the serialised value (keys, order, omitted keys).
The JSON writers are generated code backed by closures; here they run unguarded, so each
byte comes from the generated code itself."""
from __future__ import annotations

from collections.abc import Mapping

import orjson
import pytest

from llmsim.clock import FakeClock
from llmsim.errors import InvalidRequestError
from llmsim.render import sse
from llmsim.render.jsonbytes import dumps
from llmsim.render.jsoncodegen import JsonCodegen
from llmsim.render.templates import TemplateSet
from llmsim.settings import Settings
from llmsim.sim import chat_plan
from llmsim.sim import responses_plan as planning
from llmsim.simulator import Simulator

TOOL = {"type": "function", "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}
CHAT_TOOL = {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}

RESPONSES = [
    {"model": "gpt-4o", "input": "Say something."},
    {"model": "o3", "input": "Think.", "reasoning": {"effort": "high", "summary": "auto"},
     "include": ["reasoning.encrypted_content"]},
    {"model": "gpt-5", "input": "Short.", "max_output_tokens": 3, "metadata": {"k": "v"},
     "temperature": 0.3, "user": "u1", "instructions": "Be brief."},
    {"model": "gpt-4o", "input": "Weather?", "tools": [TOOL, {"type": "web_search"}],
     "tool_choice": "required", "parallel_tool_calls": True},
    {"model": "gpt-4o", "input": [{"role": "user", "content": "é ünïcode ✓"}], "store": False,
     "background": True, "text": {"format": {"type": "text"}}, "top_p": 0.5},
]
CHATS = [
    {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say something."}]},
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Two."}], "n": 2,
     "max_tokens": 4, "stream_options": {"include_usage": True}},
    {"model": "gpt-4o", "messages": [{"role": "user", "content": "Weather?"}],
     "tools": [CHAT_TOOL], "tool_choice": "required"},
]


@pytest.fixture(scope="module")
def simulator():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JsonCodegen, "GUARDED", False)
        return Simulator.load(Settings(profile="instant", seed=7, target_tokens=12), FakeClock())


@pytest.fixture
def compile_one(tmp_path, monkeypatch):
    """A one-file template set, its generated writers unguarded."""
    monkeypatch.setattr(JsonCodegen, "GUARDED", False)

    def compile_text(text: str):
        (tmp_path / "t.yaml").write_text(text)
        return TemplateSet(tmp_path)["t"]
    return compile_text


@pytest.mark.parametrize("body", RESPONSES, ids=lambda b: b["model"] + "-" + str(len(b)))
def test_responses_body_bytes_are_the_serialised_body(simulator, body):
    template = simulator.templates["responses"]
    plan = planning.plan_response(body, simulator.context(body["model"]), [])
    assert template.body_json(plan=plan, req=body) == dumps(template.body(plan=plan, req=body))


@pytest.mark.parametrize("body", CHATS, ids=lambda b: b["model"] + "-" + str(len(b)))
def test_chat_body_bytes_are_the_serialised_body(simulator, body):
    template = simulator.templates["chat"]
    plan = chat_plan.plan_chat(body, simulator.context(body["model"]))
    assert template.body_json(plan=plan, req=body) == dumps(template.body(plan=plan, req=body))


def test_error_body_bytes_keep_omitted_and_null_fields(simulator):
    template = simulator.templates["errors"]
    error = InvalidRequestError("Bad value", param="input[0].content", code="invalid_value")
    assert template.body_json(error=error) == dumps(template.body(error=error))


def test_stream_events_decode_to_objects_in_template_order(simulator):
    body = {"model": "o3", "input": "Think.", "reasoning": {"summary": "auto"}, "stream": True}
    plan = planning.plan_response(body, simulator.context("o3"), [])
    events = list(simulator.templates["responses"].events(plan=plan, req=body))
    assert [e.data["sequence_number"] for e in events] == list(range(len(events)))
    assert all(e.json == orjson.dumps(e.data) for e in events)
    assert list(events[0].data) == ["type", "sequence_number", "response"]



@pytest.mark.parametrize("body", CHATS, ids=lambda b: b["model"] + "-" + str(len(b)))
def test_chat_stream_events_are_written_by_the_generated_code(simulator, body):
    body = {**body, "stream": True}
    plan = chat_plan.plan_chat(body, simulator.context(body["model"]))
    events = [e for e in simulator.templates["chat"].events(plan=plan, req=body) if not e.raw]
    assert events and all(e.data["object"] == "chat.completion.chunk" for e in events)


def test_an_object_written_in_place_sees_its_with_values_whole_and_in_expressions(compile_one):
    t = compile_one("""
objects:
  chunk:
    id: "{{ id }}"
    choices: "{{ choices }}"
    next: "{{ k + 1 }}"
    label: "k={{ k }}"
    inner: {$object: inner, $with: {k: "{{ k * 10 }}"}}
  inner: {k: "{{ k }}", id: "{{ id }}"}
body: {$object: chunk, $with: {choices: [{text: "{{ text }}"}], k: "{{ base }}"}}
""")
    written = t.body_json(id="c1", text="hé", base=2)
    assert written == dumps(t.body(id="c1", text="hé", base=2))
    assert orjson.loads(written) == {"id": "c1", "choices": [{"text": "hé"}], "next": 3, "label": "k=2",
                                     "inner": {"k": 20, "id": "c1"}}


def test_an_object_named_by_an_expression_is_the_one_each_value_names(compile_one):
    t = compile_one("""
objects:
  kind_a: {a: "{{ v }}"}
  kind_1: {one: "{{ v }}"}
  kind_True: {flag: "{{ v }}"}
body: {$for: "v in values", $do: {$object: "kind_{{ v }}"}}
""")
    values = ["a", 1, "a", True, 1]
    written = t.body_json(values=values)
    assert written == dumps(t.body(values=values))
    assert orjson.loads(written) == [{"a": "a"}, {"one": 1}, {"a": "a"}, {"flag": True}, {"one": 1}]


def test_a_counter_like_value_is_written_as_json_whatever_it_holds(compile_one):
    t = compile_one('stream:\n  - {for: "index in values", steps: [{event: e, data: {n: "{{ index }}"}}]}\n')
    values = [0, 4095, 4096, -1, True, 2.0, "7", None]
    assert [e.json for e in t.events(values=values)] == [dumps({"n": v}) for v in values]


def test_a_step_loop_unpacks_each_item_into_its_names(compile_one):
    t = compile_one("""
stream:
  - for: "name, at in pairs"
    index: i
    steps:
      - {event: e, at: "{{ at }}", data: {name: "{{ name }}", i: "{{ i }}", seq: "{{ seq }}"}}
""")
    events = list(t.events(pairs=zip(["a", "b"], [0.5, 0.7])))
    assert [(e.at, e.data) for e in events] == [(0.5, {"name": "a", "i": 0, "seq": 0}),
                                                (0.7, {"name": "b", "i": 1, "seq": 1})]


def test_an_event_in_a_loop_calls_an_object_named_by_an_expression_with_the_loops_values(compile_one):
    objects = "".join(f"  kind_{n}: {{n: \"{{{{ n }}}}\", v: \"{{{{ v }}}}\"}}\n"
                      for n in range(JsonCodegen.MAX_PICKS + 1))
    t = compile_one(f"""
objects:
{objects}
stream:
  - for: "n in numbers"
    steps:
      - event: e
        data: {{picked: {{$object: "kind_{{{{ n }}}}", $with: {{v: "{{{{ n * 2 }}}}"}}}}}}
""")
    events = list(t.events(numbers=[3, JsonCodegen.MAX_PICKS]))
    assert [e.data for e in events] == [{"picked": {"n": 3, "v": 6}},
                                        {"picked": {"n": JsonCodegen.MAX_PICKS, "v": 2 * JsonCodegen.MAX_PICKS}}]


def test_a_stream_frame_holds_the_object_its_chunk_picks_inside_a_list_of_another(compile_one):
    t = compile_one("""
objects:
  chunk: {id: "{{ id }}", choices: "{{ choices }}", tail: 1}
  kind_text: {text: "{{ text }}", more: {$if: "{{ text == 'b' }}", $then: [1], $else: {}}}
  kind_1: {one: "{{ text }}"}
  kind_stop: {stop: true}
stream:
  - for: "kind, text in items"
    steps:
      - event: delta
        data: {$object: chunk, $with: {choices: [{$object: "kind_{{ kind }}"}]}}
  - {event: done, data: {n: "{{ seq }}"}}
""")
    items = [("text", "a"), ("text", "b"), (1, "é"), ("stop", None)]
    frames = [frame for _, frame in t.frames(id="c1", items=items)]
    assert frames == [frame for _, frame in sse.framed(t.events(id="c1", items=items))]
    assert [orjson.loads(f.split(b"data: ", 1)[1]) for f in frames] == [
        {"id": "c1", "choices": [{"text": "a", "more": {}}], "tail": 1},
        {"id": "c1", "choices": [{"text": "b", "more": [1]}], "tail": 1},
        {"id": "c1", "choices": [{"one": "é"}], "tail": 1},
        {"id": "c1", "choices": [{"stop": True}], "tail": 1},
        {"n": 4}]
    assert frames[0].startswith(b"event: delta\ndata: ") and frames[0].endswith(b"\n\n")


def test_an_object_named_by_an_expression_may_pick_one_that_loops_among_flat_ones(compile_one):
    t = compile_one("""
objects:
  kind_text: {text: "{{ text }}"}
  kind_list: {items: {$for: "x in text", $do: "{{ x }}"}}
  kind_stop: {stop: true}
stream:
  - for: "kind, text in items"
    steps:
      - event: delta
        data: {choices: [{$object: "kind_{{ kind }}"}]}
""")
    items = [("text", "a"), ("list", "bc"), ("stop", None), ("text", "d")]
    frames = [frame for _, frame in t.frames(items=items)]
    assert frames == [frame for _, frame in sse.framed(t.events(items=items))]
    assert [orjson.loads(f.split(b"data: ", 1)[1]) for f in frames] == [
        {"choices": [{"text": "a"}]}, {"choices": [{"items": ["b", "c"]}]},
        {"choices": [{"stop": True}]}, {"choices": [{"text": "d"}]}]


def test_a_loop_over_request_data_is_written_anew_when_it_reads_what_each_event_binds(compile_one):
    t = compile_one("""
stream:
  - for: "x in xs"
    steps:
      - event: e
        data:
          fixed: {$for: "y in ys", $do: "{{ y }}"}
          mixed: {$for: "y in ys", $do: ["{{ x }}", "{{ y }}"]}
""")
    events = list(t.events(xs=["a", "b"], ys=[1, 2]))
    assert [e.data for e in events] == [{"fixed": [1, 2], "mixed": [["a", 1], ["a", 2]]},
                                        {"fixed": [1, 2], "mixed": [["b", 1], ["b", 2]]}]
    assert [e.json for e in events] == [dumps(e.data) for e in events]


def test_an_event_in_an_inner_loop_writes_each_run_of_it_with_that_runs_outer_item(compile_one):
    t = compile_one("""
stream:
  - for: "x in xs"
    index: i
    steps:
      - for: "y in x.ys"
        steps:
          - event: e
            data: {outer: "{{ x.name }}", at: "{{ i }}", y: "{{ y }}", n: "{{ seq }}"}
""")
    events = list(t.events(xs=[{"name": "a", "ys": [1, 2]}, {"name": "b", "ys": [3]}]))
    assert [e.data for e in events] == [{"outer": "a", "at": 0, "y": 1, "n": 0},
                                        {"outer": "a", "at": 0, "y": 2, "n": 1},
                                        {"outer": "b", "at": 1, "y": 3, "n": 2}]
    assert [e.json for e in events] == [dumps(e.data) for e in events]


def test_a_for_or_with_reusing_an_outer_loops_name_is_written_with_its_own_values(compile_one):
    t = compile_one("""
objects:
  named: {x: "{{ x }}"}
stream:
  - for: "x in xs"
    steps:
      - for: "y in ys"
        steps:
          - event: e
            data:
              looped: {$for: "x in [y, y + 1]", $do: {x: "{{ x }}"}}
              with: {$object: named, $with: {x: "{{ y * 10 }}"}}
              outer: "{{ x }}"
""")
    events = list(t.events(xs=["a"], ys=[1, 2]))
    assert [e.data for e in events] == [{"looped": [{"x": 1}, {"x": 2}], "with": {"x": 10}, "outer": "a"},
                                        {"looped": [{"x": 2}, {"x": 3}], "with": {"x": 20}, "outer": "a"}]
    assert [e.json for e in events] == [dumps(e.data) for e in events]


class Counted:
    """A render variable counting how often its `n` is read."""
    def __init__(self):
        self.reads = 0

    @property
    def n(self):
        self.reads += 1
        return self.reads


LOOPING_OBJECT = """
objects:
  head:
    tag: "{{ tag }}"
    n: "{{ src.n }}"
    seen: {$for: "v in vs", $do: "{{ v }}"}
"""


def test_an_object_events_call_with_constants_is_written_with_each_calls_and_each_renders_values(compile_one):
    t = compile_one(LOOPING_OBJECT + """
stream:
  - event: first
    data: {type: first, head: {$object: head, $with: {tag: t}}}
  - event: second
    data: {type: second, head: {$object: head, $with: {tag: t}}}
  - event: other
    data: {type: other, head: {$object: head, $with: {tag: u}}}
""")
    src = Counted()
    written = [orjson.loads(e.json) for e in t.events(src=src, vs=[1, 2])]
    assert [w["head"] for w in written] == [{"tag": "t", "n": 1, "seen": [1, 2]},
                                           {"tag": "t", "n": 1, "seen": [1, 2]},
                                           {"tag": "u", "n": 1, "seen": [1, 2]}]
    again = [orjson.loads(e.json)["head"] for e in t.events(src=src, vs=[3])]
    assert again[0] == again[1] == {"tag": "t", "n": 2, "seen": [3]}   # a new render: anew


def test_an_object_reading_a_loop_variable_is_written_anew_in_each_event(compile_one):
    t = compile_one(LOOPING_OBJECT.replace('tag: "{{ tag }}"', 'tag: "{{ tag }}-{{ x }}"') + """
stream:
  - for: "x in xs"
    steps:
      - event: e
        data: {head: {$object: head, $with: {tag: t}}}
""")
    events = list(t.events(src=Counted(), vs=[], xs=["a", "b"]))
    assert [orjson.loads(e.json)["head"]["tag"] for e in events] == ["t-a", "t-b"]
    assert [e.json for e in events] == [dumps(e.data) for e in events]


def test_an_object_reading_the_sequence_number_is_written_anew_in_each_event(compile_one):
    t = compile_one(LOOPING_OBJECT.replace('tag: "{{ tag }}"', 'tag: "{{ seq }}"') + """
stream:
  - event: first
    data: {head: {$object: head, $with: {tag: t}}}
  - event: second
    data: {head: {$object: head, $with: {tag: t}}}
""")
    events = list(t.events(src=Counted(), vs=[]))
    assert [orjson.loads(e.json)["head"]["tag"] for e in events] == [0, 1]


def test_an_object_called_inside_another_sees_what_each_call_of_the_outer_one_binds(compile_one):
    t = compile_one("""
objects:
  inner: {tag: "{{ tag }}", seen: {$for: "v in vs", $do: "{{ v }}"}}
  outer: {inner: {$object: inner, $with: {k: 1}}, seen: {$for: "v in vs", $do: "{{ v }}"}}
stream:
  - event: a
    data: {$object: outer, $with: {tag: a}}
  - event: b
    data: {$object: outer, $with: {tag: b}}
""")
    events = list(t.events(vs=[1]))
    assert [orjson.loads(e.json)["inner"]["tag"] for e in events] == ["a", "b"]


@pytest.mark.parametrize("empty", [[], (), {}, iter(())], ids=["list", "tuple", "dict", "iterator"])
def test_a_loop_over_an_empty_source_writes_an_empty_list_in_bodies_and_events(compile_one, empty):
    t = compile_one("""
body: {xs: {$for: "x in src", $do: {x: "{{ x }}"}}, n: 1}
stream:
  - event: e
    data: {xs: {$for: "x in src", $do: {x: "{{ x }}"}}, ys: {$for: "y in src", $do: 1}}
""")
    assert orjson.loads(t.body_json(src=empty)) == {"xs": [], "n": 1}
    assert [orjson.loads(e.json) for e in t.events(src=[])] == [{"xs": [], "ys": []}]


def test_given_writes_its_default_for_a_missing_or_null_value_and_keeps_any_other(compile_one):
    t = compile_one("""
body:
  missing: "{{ given(nothing, 'd') }}"
  value: "{{ given(v, 'd') }}"
  user: "{{ given(req.get('user'), omit) }}"
  rows: {$for: "r in given(req.get('rows'), [])", $do: "{{ r }}"}
""")
    for v, req in ((None, {}), (0, {"user": "u", "rows": [1]}), ("", {"user": None, "rows": None})):
        written = t.body_json(v=v, req=req)
        assert written == dumps(t.body(v=v, req=req))
    assert orjson.loads(t.body_json(v=0, req={"user": "u", "rows": [1]})) == \
        {"missing": "d", "value": 0, "user": "u", "rows": [1]}
    assert orjson.loads(t.body_json(v=None, req={})) == {"missing": "d", "value": "d", "rows": []}


def test_an_echoed_request_field_writes_its_default_only_when_the_field_is_absent_or_null(compile_one):
    t = compile_one("""
body:
  temperature: "{{ given(req.get('temperature'), 1.0) }}"
  text: "{{ given(req.get('text'), {'format': {'type': 'text'}}) }}"
  store: "{{ given(req.get('store'), true) }}"
""")
    for req in ({}, {"temperature": None, "text": None, "store": None},
                {"temperature": 0, "text": {"format": {"type": "json_object"}}, "store": False}):
        written = t.body_json(req=req)
        assert written == dumps(t.body(req=req))
    assert orjson.loads(t.body_json(req={})) == {"temperature": 1.0, "text": {"format": {"type": "text"}},
                                                 "store": True}
    assert orjson.loads(t.body_json(req={"temperature": 0, "store": False, "text": None})) == {
        "temperature": 0, "text": {"format": {"type": "text"}}, "store": False}


def test_a_body_loop_of_objects_named_by_expression_sees_the_loop_and_with_values(compile_one):
    """A body is built as one value; a loop item it cannot build in place (an object named by
    an expression) is written with the variables the body holds: the loop's and `$with` ones."""
    t = compile_one("""
objects:
  kind_a: {a: "{{ v }}", tag: "{{ tag }}"}
  kind_b: {b: "{{ v }}", tag: "{{ tag }}"}
  outer:
    items: {$for: "v in values", $do: {$object: "kind_{{ v }}"}}
    tag: "{{ tag }}"
body: {$object: outer, $with: {tag: "{{ label | upper }}"}}
""")
    written = t.body_json(values=["a", "b"], label="x")
    assert written == dumps(t.body(values=["a", "b"], label="x"))
    assert orjson.loads(written) == {"items": [{"a": "a", "tag": "X"}, {"b": "b", "tag": "X"}], "tag": "X"}


def test_a_body_object_named_by_expression_gets_its_own_with_values(compile_one):
    """Each object a body's loop names by the item's value is built with the `$with` values
    given there, computed for that item; values naming no object in place go on by name."""
    t = compile_one("""
objects:
  kind_a: {a: "{{ w }}"}
  kind_b: {b: "{{ w }}", also: "{{ v }}"}
  kind_1: {one: "{{ w }}"}
body: {$for: "v in values", $do: {$object: "kind_{{ v }}", $with: {w: "{{ v ~ '!' }}"}}}
""")
    values = ["b", "a", 1, "b"]
    written = t.body_json(values=values)
    assert written == dumps(t.body(values=values))
    assert orjson.loads(written) == [{"b": "b!", "also": "b"}, {"a": "a!"}, {"one": "1!"},
                                     {"b": "b!", "also": "b"}]


def test_a_body_object_named_by_expression_is_built_in_place_or_by_name(compile_one):
    """The objects a body's loop names by the item's value are built in place, each with its
    `$with` values; a pick reading a variable nothing else in the body reads (given to some
    renders only), and a value that is not a string, go on by name."""
    t = compile_one("""
objects:
  kind_a: {a: "{{ w }}"}
  kind_c: {c: "{{ w }}", extra: "{{ extra }}"}
  kind_1: {one: "{{ w }}"}
body: {$for: "v in values", $do: {$object: "kind_{{ v }}", $with: {w: "{{ [v] }}"}}}
""")
    assert orjson.loads(t.body_json(values=["a", "c", 1], extra=5)) == \
        [{"a": ["a"]}, {"c": ["c"], "extra": 5}, {"one": [1]}]
    assert orjson.loads(t.body_json(values=["a"])) == [{"a": ["a"]}]


@pytest.mark.filterwarnings("error::SyntaxWarning")     # a constant spliced into `v is none` is folded
def test_constant_with_values_are_written_whole_and_read_in_expressions(compile_one):
    """`$with` constants (null, a bool, a number, a string) give the same JSON written out
    whole and the same value read in an expression, in events and in a body."""
    t = compile_one("""
objects:
  shown: {v: "{{ v }}", is_none: "{{ v is none }}", doubled: "{{ [v, v] }}", n: "{{ seq }}"}
body:
  - {$object: shown, $with: {v: null, seq: 0}}
  - {$object: shown, $with: {v: true, seq: 0}}
  - {$object: shown, $with: {v: 7, seq: 0}}
  - {$object: shown, $with: {v: queued, seq: 0}}
stream:
  - event: e
    data: [{$object: shown, $with: {v: null}}, {$object: shown, $with: {v: queued}}]
""")
    expected = [{"v": v, "is_none": v is None, "doubled": [v, v], "n": 0} for v in (None, True, 7, "queued")]
    assert orjson.loads(t.body_json()) == expected
    (event,) = list(t.events())
    assert event.json == dumps([{**expected[0]}, {**expected[3]}])


def test_an_expression_reads_a_dicts_key_and_anything_elses_attribute(tmp_path):
    """The lookup rule: `m.k` of a dict is its key (a key named like a dict method too); of
    anything else, a mapping that is no dict included, the attribute."""
    class Config(Mapping):
        k = "attribute"

        def __getitem__(self, key):
            return "item"

        def __iter__(self):
            return iter(["k"])

        def __len__(self):
            return 1
    (tmp_path / "t.yaml").write_text('body: {v: "{{ m.k if flag else none }}"}')
    (tmp_path / "u.yaml").write_text('body: {items: "{{ m.items if flag else none }}"}')
    templates = TemplateSet(tmp_path)
    assert orjson.loads(templates["t"].body_json(m={"k": 1}, flag=True)) == {"v": 1}
    assert orjson.loads(templates["u"].body_json(m={"items": [2]}, flag=True)) == {"items": [2]}
    assert orjson.loads(templates["t"].body_json(m=Config(), flag=True)) == {"v": "attribute"}


def test_a_body_drops_omitted_entries_and_loop_items(compile_one):
    t = compile_one("""
body:
  kept: "{{ n }}"
  dropped: "{{ omit if n else 1 }}"
  evens: {$for: "i in range(n)", $do: "{{ i if i % 2 == 0 else omit }}"}
  maybe: {$if: "{{ n > 5 }}", $then: {big: true}}
  list: ["{{ omit }}", "{{ n }}"]
""")
    written = t.body_json(n=4)
    assert written == dumps(t.body(n=4))
    assert orjson.loads(written) == {"kept": 4, "evens": [0, 2], "list": [4]}


def test_a_body_loop_item_computed_by_a_jinja_statement_sees_its_loop_variable(compile_one):
    t = compile_one("""
body: {$for: "x in xs", $do: {label: "{% if x > 1 %}many{% else %}one{% endif %}", x: "{{ x }}"}}
""")
    written = t.body_json(xs=[1, 2])
    assert written == dumps(t.body(xs=[1, 2]))
    assert orjson.loads(written) == [{"label": "one", "x": 1}, {"label": "many", "x": 2}]


def test_a_loop_over_a_name_three_deep_is_written_in_a_body_and_in_events(compile_one):
    t = compile_one("""
body:
  xs: {$for: "x in a.b.c", $do: "{{ x }}"}
  items: ["{{ given(req.get('u'), omit) }}", {$object: o}, "{{ a.b.c[0] }}"]
objects:
  o: {v: "{{ omit if a.b.c else 1 }}"}
stream:
  - event: e
    data: {xs: {$for: "x in a.b.c", $do: "{{ x }}"}}
""")
    ctx = {"a": {"b": {"c": [1, 2]}}, "req": {}}
    assert t.body_json(**ctx) == dumps(t.body(**ctx))
    assert orjson.loads(t.body_json(**ctx)) == {"xs": [1, 2], "items": [{}, 1]}
    assert [e.json for e in t.events(**ctx)] == [b'{"xs":[1,2]}']


def test_dotted_reads_and_none_tests_written_in_place_read_as_the_lookup_rule(compile_one):
    """`x.a is none` and `x.b.c`, which generated code reads in place (no lookup call), give
    what the lookup rule gives: a dict's key or an object's attribute, and a missing one is
    Undefined (not none) for the test."""
    t = compile_one("""
body:
  none: "{{ x.a is none }}"
  some: "{{ x.a is not none }}"
  deep: "{{ x.b.c }}"
""")

    class Holder:
        def __init__(self, **fields):
            self.__dict__.update(fields)
    cases = [{"a": None, "b": {"c": 1}}, {"a": 2, "b": {"c": [3]}}, {"b": {"c": "s"}},
             Holder(a=None, b=Holder(c=4)), Holder(b={"c": 5})]
    seen = []
    for x in cases:
        written = t.body_json(x=x)
        assert written == dumps(t.body(x=x))
        seen.append(orjson.loads(written))
    assert [(s["none"], s["some"]) for s in seen] == [(True, False), (False, True), (False, True),
                                                      (True, False), (False, True)]
    assert [s["deep"] for s in seen] == [1, [3], "s", 4, 5]
