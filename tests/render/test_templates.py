"""Templates: the YAML that defines every wire shape. A broken template fails create_app naming
file and path; `--templates DIR` and `--spec FILE` change the wire without code."""
from __future__ import annotations

import itertools
import shutil
import subprocess
import sys

import httpx
import pytest
import yaml

import llmsim.render.sse
import sse
from conftest import REPO
from llmsim.app import create_app
from llmsim.errors import ConfigError, ServerError
from llmsim.render.templates import TemplateSet
from llmsim.settings import Settings

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own


@pytest.fixture
def templates_copy(tmp_path):
    """A copy of our templates directory, and a function to edit one file as YAML."""
    target = tmp_path / "templates"
    shutil.copytree(REPO / "templates", target)

    def edit(name: str, change) -> None:
        path = target / f"{name}.yaml"
        doc = yaml.safe_load(path.read_text())
        change(doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return target, edit


def start_fails(directory) -> str:
    with pytest.raises(ConfigError) as caught:
        create_app(Settings(profile="instant", templates=str(directory)))
    return str(caught.value)


def add_object(name, value):
    return lambda doc: doc["objects"].__setitem__(name, value)


def add_step(step):
    return lambda doc: doc["stream"].append(step)


@pytest.mark.parametrize("change, where, what", [
    (add_object("broken", {"x": {"$object": "no_such_object"}}), "objects.broken.x.$object", "no_such_object"),
    (add_object("broken", {"x": "{{ 1 + }}"}), "objects.broken.x", "bad expression"),
    (add_object("broken", {"x": "{{ plan.id }} {% if %}"}), "objects.broken.x", "bad template"),
    (add_object("broken", {"x": {"$for": "item plan.output", "$do": 1}}), "objects.broken.x.$for", "NAME in"),
    (add_step({"event": "response.extra"}), "stream[", "data"),
    (add_step({"for": "item in plan.output", "steps": [{"event": "x", "data": {}, "colour": 1}]}), "stream[", ""),
    (lambda doc: doc.__setitem__("bodee", {}), "bodee", ""),
], ids=["unknown-object", "bad-expression", "bad-text-template", "bad-loop", "step-without-data",
        "unknown-step-key", "unknown-top-level-key"])
def test_broken_template_fails_start_up_naming_file_and_path(templates_copy, change, where, what):
    directory, edit = templates_copy
    edit("responses", change)
    message = start_fails(directory)
    assert "responses.yaml" in message
    assert where in message and what in message


@pytest.mark.live
def test_broken_template_stops_a_server_with_workers_before_it_listens(templates_copy):
    directory, edit = templates_copy
    edit("responses", add_object("broken", {"x": {"$object": "no_such_object"}}))
    result = subprocess.run([sys.executable, "-m", "llmsim", "serve", "--port", "0", "--workers", "2",
                             "--templates", str(directory)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "responses.yaml" in result.stderr and "objects.broken.x.$object" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_for_value_binding_several_names_fails_start_up_naming_file_and_path(tmp_path):
    (tmp_path / "t.yaml").write_text('body: {$for: "a, b in pairs", $do: "{{ a }}"}\n')
    with pytest.raises(ConfigError) as caught:
        TemplateSet(tmp_path)
    assert "t.yaml" in str(caught.value) and "body.$for" in str(caught.value)


def test_invalid_yaml_fails_start_up_naming_the_file(templates_copy):
    directory, _ = templates_copy
    (directory / "responses.yaml").write_text("objects: [unclosed\n")
    message = start_fails(directory)
    assert "responses.yaml" in message and "not valid YAML" in message


def test_object_defined_twice_fails_start_up(templates_copy):
    directory, _ = templates_copy
    (directory / "extra.yaml").write_text("objects:\n  response: {id: x}\n")
    message = start_fails(directory)
    assert "extra.yaml" in message and "response" in message and "already defined" in message


def test_missing_template_fails_start_up_naming_it(templates_copy):
    directory, _ = templates_copy
    (directory / "models.yaml").unlink()
    assert "models.yaml" in start_fails(directory)


def test_empty_templates_directory_fails_start_up(tmp_path):
    assert "no *.yaml templates" in start_fails(tmp_path)


def test_templates_override_changes_the_wire(templates_copy, live_server_factory):
    """A user edits YAML: a new field on every response object and a `[DONE]` line after the stream."""
    directory, edit = templates_copy
    def change(doc):
        doc["objects"]["response"]["x_simulated_by"] = "llmsim"
        doc["stream"].append({"raw": "[DONE]"})
    edit("responses", change)
    server = live_server_factory("--profile", "instant", "--templates", str(directory))
    body = httpx.post(f"{server.base}/responses", json={"model": "gpt-4o", "input": "hi"}).json()
    assert body["x_simulated_by"] == "llmsim"
    text = httpx.post(f"{server.base}/responses", json={"model": "gpt-4o", "input": "hi", "stream": True}).text
    events = sse.parse(text)
    assert events[0][1]["response"]["x_simulated_by"] == "llmsim"
    assert events[-1] == (None, "[DONE]")
    assert server.client().responses.create(model="gpt-4o", input="hi").status == "completed"


async def test_spec_override_changes_what_is_accepted(tmp_path, app_client):
    doc = yaml.safe_load((REPO / "openapi" / "openapi.yaml").read_text())
    doc["components"]["schemas"]["CreateResponseRequest"]["properties"]["temperature"]["maximum"] = 5
    spec = tmp_path / "openapi.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    request = {"model": "gpt-4o", "input": "hi", "temperature": 3.5}
    async with app_client() as ours, app_client(spec=str(spec)) as theirs:
        assert (await ours.post("/v1/responses", json=request)).status_code == 400
        response = await theirs.post("/v1/responses", json=request)
        assert response.status_code == 200 and response.json()["temperature"] == 3.5
        served = (await theirs.get("/openai/v1/openapi.json")).json()
    assert served["components"]["schemas"]["CreateResponseRequest"]["properties"]["temperature"]["maximum"] == 5


# ---- the template language itself, on tiny template files ----

def compile_one(tmp_path, text: str):
    (tmp_path / "t.yaml").write_text(text)
    return TemplateSet(tmp_path)["t"]


def test_whole_expression_keeps_its_type_and_text_template_gives_a_string(tmp_path):
    t = compile_one(tmp_path, 'body: {n: "{{ x }}", items: "{{ [x, none] }}", text: "x={{ x }}"}\n')
    assert t.body(x=3) == {"n": 3, "items": [3, None], "text": "x=3"}


def test_omit_drops_keys_and_list_entries(tmp_path):
    t = compile_one(tmp_path, 'body: {a: "{{ omit }}", b: 1, c: ["{{ omit }}", 2]}\n')
    assert t.body() == {"b": 1, "c": [2]}


def test_given_keeps_falsy_values_and_replaces_none(tmp_path):
    t = compile_one(tmp_path, 'body: {a: "{{ given(x, 5) }}", b: "{{ given(y, 5) }}"}\n')
    assert t.body(x=0, y=None) == {"a": 0, "b": 5}


def test_object_with_for_and_if(tmp_path):
    t = compile_one(tmp_path, """
objects:
  item: {name: "{{ n }}", tag: "{{ tag }}"}
body:
  items: {$for: "n in names", $do: {$object: item, $with: {tag: "t-{{ n }}"}}}
  kind: {$if: "{{ names | length > 1 }}", $then: many, $else: one}
""")
    assert t.body(names=["a", "b"]) == {"items": [{"name": "a", "tag": "t-a"}, {"name": "b", "tag": "t-b"}],
                                        "kind": "many"}


def test_stream_steps_loop_branch_time_and_number_events(tmp_path):
    t = compile_one(tmp_path, """
stream:
  - {event: start, data: {seq: "{{ seq }}"}}
  - for: "x in xs"
    index: i
    steps:
      - {event: item, at: "{{ x }}", data: {x: "{{ x }}", i: "{{ i }}", seq: "{{ seq }}"}}
  - if: "{{ xs | length > 2 }}"
    steps: [{event: long, data: {}}]
    else: [{event: short, data: {seq: "{{ seq }}"}}]
  - {raw: "[DONE]"}
""")
    events = list(t.events(xs=[0.5, 0.7]))
    assert [(e.name, e.data, e.at) for e in events] == [
        ("start", {"seq": 0}, 0.0),
        ("item", {"x": 0.5, "i": 0, "seq": 1}, 0.5),
        ("item", {"x": 0.7, "i": 1, "seq": 2}, 0.7),
        ("short", {"seq": 3}, 0.7),          # no `at`: due with the step before
        (None, "[DONE]", 0.7),
    ]
    assert events[-1].raw


def test_a_stream_as_sse_frames_is_its_events_framed_one_by_one(tmp_path):
    t = compile_one(tmp_path, """
stream:
  - {event: start, data: {seq: "{{ seq }}"}}
  - for: "x in xs"
    steps:
      - {at: "{{ x }}", data: {x: "{{ x }}", seq: "{{ seq }}"}}
  - {event: nothing, data: "{{ none }}"}
  - {raw: "[DONE]"}
""")
    assert list(t.frames(xs=[0.5, 0.7])) == [
        (0.0, b'event: start\ndata: {"seq":0}\n\n'),
        (0.5, b'data: {"x":0.5,"seq":1}\n\n'), (0.7, b'data: {"x":0.7,"seq":2}\n\n'),
        (0.7, b"event: nothing\ndata: null\n\n"), (0.7, b"data: [DONE]\n\n")]
    assert list(t.frames(xs=[0.5, 0.7])) == list(llmsim.render.sse.framed(t.events(xs=[0.5, 0.7])))


def test_a_test_inside_a_loop_reads_the_item_of_that_run_of_the_loop(tmp_path):
    t = compile_one(tmp_path, """
stream:
  - for: "x, tag in pairs"
    steps:
      - if: "{{ x > 1 and tag != 'skip' }}"
        steps: [{event: big, data: {x: "{{ x }}"}}]
        else: [{event: small, data: {tag: "{{ tag }}"}}]
""")
    pairs = [(1, "a"), (2, "b"), (3, "skip"), (5, "c")]
    assert [(e.name, e.data) for e in t.events(pairs=pairs)] == [
        ("small", {"tag": "a"}), ("big", {"x": 2}), ("small", {"tag": "skip"}), ("big", {"x": 5})]
    assert [f for _, f in t.frames(pairs=pairs)] == [f for _, f in llmsim.render.sse.framed(t.events(pairs=pairs))]


def test_nested_loops_see_outer_variables_and_a_loop_variable_ends_with_its_loop(tmp_path):
    t = compile_one(tmp_path, """
stream:
  - for: "row in rows"
    index: r
    steps:
      - for: "cell in row"
        steps: [{event: cell, data: {r: "{{ r }}", cell: "{{ cell }}", seq: "{{ seq }}"}}]
  - {event: after, data: {row: "{{ row }}"}}
""")
    events = t.events(rows=[["a", "b"], [], ["c"]])
    assert [(e.name, e.data) for e in itertools.islice(events, 3)] == [
        ("cell", {"r": 0, "cell": "a", "seq": 0}), ("cell", {"r": 0, "cell": "b", "seq": 1}),
        ("cell", {"r": 2, "cell": "c", "seq": 2})]
    with pytest.raises(ServerError) as caught:       # a template bug: the server's error
        next(events)
    assert isinstance(caught.value.__cause__, ConfigError) and "row" in str(caught.value.__cause__)


def test_undefined_variable_at_render_names_file_and_path(tmp_path):
    t = compile_one(tmp_path, 'body: {a: {b: "{{ missing.field }}"}}\n')
    with pytest.raises(ConfigError) as caught:
        t.body()
    assert "t.yaml" in str(caught.value) and "body.a.b" in str(caught.value)


def test_an_undefined_variable_in_a_step_time_names_file_and_path(tmp_path, caplog):
    t = compile_one(tmp_path, 'stream:\n  - {event: e, at: "{{ missing.at }}", data: {}}\n')
    with pytest.raises(ServerError):
        list(t.events())
    [record] = [r for r in caplog.records if r.name == "llmsim.templates"]
    assert "t.yaml" in record.getMessage() and "stream[0].at" in record.getMessage()
