"""YAML event-sequence templates: loaded, checked and compiled once at start-up.

A template file may hold `objects` (named values, embedded with `$object`/`$with`), `body`
(a non-streaming answer) and `stream` (event steps: `event`/`data`/`at`, `raw`, `for`, `if`).
Values are YAML with jinja2 expressions; `$for`, `$if`, `$object` are directives; a value
that renders to `omit` drops its key. Invariants: every error is found at start-up
(ConfigError naming file and path) where it can be; each value is a closure (the test
oracle) and generated code (jsoncodegen, stepcodegen) that gives the same bytes.
The template language: docs/templates.md; the story: docs/internals.md#rendertemplates.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterator

import jinja2
import orjson

from llmsim import datafiles
from llmsim.errors import APIError, ConfigError
from llmsim.render import pyexpr
from llmsim.render.jsonbytes import dumps
from llmsim.render.jsoncodegen import JsonCodegen
from llmsim.render.jsonwriter import JsonCompiler
from llmsim.render.stepcodegen import NO_ROLE, Role, StepCodegen
from llmsim.render.template_syntax import LOOP, ONE_NAME, bound_names, entry_key, loop_names, node_kind

Node = Callable[[dict], Any]


class _Omit:
    def __repr__(self) -> str:
        return "omit"


OMIT = _Omit()
_WHOLE_EXPR = re.compile(r"^\{\{(.*)\}\}$", re.S)
_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


class Event:
    """One rendered stream step: `name` is the SSE event name (None for data-only lines),
    `at` its due time (seconds after start). A JSON event has `json`, its serialised data
    (what transports send), and `data`, the same value decoded on demand; a raw line
    (`raw=True`, e.g. `[DONE]`) has the string as `data` and no `json`."""
    __slots__ = ("name", "at", "raw", "_data", "_json")    # llmsim.render.stepcodegen sets them directly

    def __init__(self, name: str | None, data: Any = None, at: float = 0.0, raw: bool = False,
                 json: bytes | None = None):
        self.name = name            # one statement each: a tuple assignment costs more,
        self.at = at                # and every streamed event makes one
        self.raw = raw
        self._data = data
        self._json = json

    @property
    def data(self) -> Any:
        if self._data is None and self._json is not None:
            self._data = orjson.loads(self._json)
        return self._data

    @property
    def json(self) -> bytes | None:
        if self._json is None and not self.raw:
            self._json = dumps(self._data)
        return self._json

    def __repr__(self) -> str:
        return f"Event({self.name!r}, at={self.at!r}, {self.data!r})"


class MarkedEvent(Event):
    """An `Event` with the `Role` its step declares (`Template.marked`)."""
    __slots__ = ("role",)

    def __init__(self, name: str | None, data: Any = None, at: float = 0.0, raw: bool = False,
                 json: bytes | None = None, role: Role = NO_ROLE):
        super().__init__(name, data, at, raw, json)
        self.role = role


class _Const:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __call__(self, ctx):
        return self.value


def _getter(path: str) -> Node:
    """`a.b.c` by the lookup rule (llmsim.render.pyexpr); Undefined when a step is missing."""
    head, *rest = path.split(".")
    attr = pyexpr.lookup_attr

    def get(ctx):
        value = ctx[head]
        for name in rest:
            value = attr(value, name)
        return value
    return get


class Compiler:
    """Turns YAML values and steps into closures; errors name file and path."""

    def __init__(self, objects: dict[str, Node], raw_objects: dict[str, Any]):
        self.names = set(raw_objects)
        self.env = pyexpr.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
        self.env.globals["omit"] = OMIT
        self.env.globals["given"] = _given
        self.env.filters["tojson"] = _tojson
        self.objects = objects
        self._kinds = {"string": self.string, "list": self._list, "$object": self._object,
                       "$for": self._for, "$if": self._if, "dict": self._dict,
                       "const": lambda node, where: _Const(node)}
        self.json = JsonCompiler(self, OMIT, _Const)    # the same values, written as JSON bytes
        self.codegen = JsonCodegen(self, OMIT, raw_objects)   # ... by generated code, fast
        self.stepgen = StepCodegen(self, Event, MarkedEvent)

    def fast(self, node: Any, where: str) -> Node:
        """`node`'s value by generated code, backed by the closure."""
        return self.codegen.value_function(node, where, reference=self.value(node, where))

    def json_writer(self, node: Any, where: str, name: str | None = None, once: bool = False,
                    loop_fixed: frozenset[str] = frozenset()) -> Callable[[dict], bytes | None]:
        """`node`'s JSON bytes writer: generated code, the closure writer naming its errors (the
        object `name`'s, when given: other writers call or inline it); `once` and `loop_fixed`:
        see `JsonCodegen.writer`."""
        return self.codegen.writer(node, where, reference=self.json.value(node, where), name=name, once=once,
                                   loop_fixed=loop_fixed)

    def expression(self, source: str, where: str) -> Node:
        source = source.strip()
        if _DOTTED.match(source) and source not in ("omit", "none", "None", "true", "false"):
            get = _getter(source)

            def checked(ctx):
                try:
                    value = get(ctx)
                except (KeyError, jinja2.UndefinedError) as exc:
                    raise ConfigError(f"{where}: '{source}' is undefined ({exc})") from None
                except APIError:
                    raise
                except Exception as exc:        # (a property of the context's object failed)
                    raise ConfigError(f"{where}: '{source}': {type(exc).__name__}: {exc}") from exc
                if isinstance(value, jinja2.Undefined):
                    raise ConfigError(f"{where}: '{source}' is undefined ({value._undefined_message})")
                return value
            return checked
        native = pyexpr.compile_expression(source, self.env.globals)
        if native is not None:
            def run_native(ctx):
                try:
                    value = native(ctx)
                except (KeyError, AttributeError, jinja2.UndefinedError) as exc:
                    raise ConfigError(f"{where}: {source!r}: {exc}") from None
                except APIError:
                    raise
                except Exception as exc:        # (1 + 'a', 1 // 0, ...)
                    raise ConfigError(f"{where}: {source!r}: {type(exc).__name__}: {exc}") from exc
                if isinstance(value, jinja2.Undefined):
                    raise ConfigError(f"{where}: {source!r} is undefined ({value._undefined_message})")
                return value
            return run_native
        try:
            compiled = self.env.compile_expression(source, undefined_to_none=False)
        except jinja2.TemplateError as exc:     # (bad syntax, or a constant part that fails)
            raise ConfigError(f"{where}: bad expression {source!r}: {exc.message}") from None

        def run(ctx):
            try:
                value = compiled(**ctx)
            except jinja2.UndefinedError as exc:
                raise ConfigError(f"{where}: {exc.message}") from None
            except APIError:
                raise
            except Exception as exc:
                raise ConfigError(f"{where}: {source!r}: {type(exc).__name__}: {exc}") from exc
            if isinstance(value, jinja2.Undefined):
                raise ConfigError(f"{where}: {source!r} is undefined")
            return value
        return run

    def string(self, text: str, where: str) -> Node:
        whole = _WHOLE_EXPR.match(text)
        if whole and "{{" not in whole.group(1):
            return self.expression(whole.group(1), where)
        if "{{" not in text and "{%" not in text:
            return _Const(text)
        one = ONE_NAME.match(text)
        if one and one.group(2) not in ("omit", "none", "None", "true", "false"):
            prefix, get, suffix = one.group(1), self.expression(one.group(2), where), one.group(3)
            return lambda ctx: f"{prefix}{get(ctx)}{suffix}"
        try:
            template = self.env.from_string(text)
        except jinja2.TemplateError as exc:
            raise ConfigError(f"{where}: bad template {text!r}: {exc.message}") from None
        return lambda ctx: template.render(ctx)

    def value(self, node: Any, where: str) -> Node:
        return self._kinds[node_kind(node)](node, where)

    def _dict(self, node: dict, where: str) -> Node:
        if "$key" in node or "$do" in node:
            raise ConfigError(f"{where}: $key and $do belong to a $for")
        items = [(key, self.value(val, f"{where}.{key}")) for key, val in node.items()]
        if all(isinstance(f, _Const) for _, f in items) and not any(f.value is OMIT for _, f in items):
            return _Const({k: f.value for k, f in items})

        def render(ctx):
            out = {}
            for key, f in items:
                value = f(ctx)
                if value is not OMIT:
                    out[key] = value
            return out
        return render

    def _list(self, node: list, where: str) -> Node:
        parts = [self.value(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if all(isinstance(f, _Const) for f in parts):
            return _Const([f.value for f in parts])
        return lambda ctx: [v for v in (f(ctx) for f in parts) if v is not OMIT]

    def _object(self, node: dict, where: str) -> Node:
        return self.embedding(node, where, self.objects)

    def embedding(self, node: dict, where: str, objects: dict[str, Callable]) -> Callable:
        """`{$object: name, $with: {...}}`: the object of that name in `objects` (values, or
        a JSON compiler's writers), rendered with the `$with` variables added."""
        name_node = self.value(node["$object"], f"{where}.$object")
        extra = [(k, self.value(v, f"{where}.$with.{k}")) for k, v in (node.get("$with") or {}).items()]
        if isinstance(name_node, _Const) and name_node.value not in self.names:
            raise ConfigError(f"{where}.$object: no object named {name_node.value!r}; "
                              f"known: {', '.join(sorted(self.names))}")

        def render(ctx):
            name = name_node(ctx)
            try:
                target = objects[name]
            except KeyError:
                raise ConfigError(f"{where}.$object: no object named {name!r}") from None
            if extra:
                ctx = {**ctx, **{k: f(ctx) for k, f in extra}}
            return target(ctx)
        return render

    def loop(self, spec: str, where: str, unpacks: bool = False) -> tuple[Any, Node]:
        """A loop's name and its items' source; with `unpacks` (a stream step's loop) the
        tuple of its names ("text, at in pairs" unpacks each item)."""
        match = LOOP.match(spec if isinstance(spec, str) else "")
        if not match:
            raise ConfigError(f"{where}: loop must read 'NAME in EXPRESSION', got {spec!r}")
        names = loop_names(match)
        if len(names) > 1 and not unpacks:
            raise ConfigError(f"{where}: a $for binds one name, got {spec!r}; unpack items in "
                              "a stream step's `for` instead")
        return names if unpacks else names[0], self.string("{{" + match.group(2) + "}}", where)

    def _for(self, node: dict, where: str) -> Node:
        if "$key" in node:
            entries = self.entries(node, where, self.value, OMIT)
            return lambda ctx: dict(entries(ctx))
        items = self.items(node, where, self.value)
        return lambda ctx: [value for value in items(ctx) if value is not OMIT]

    def items(self, node: dict, where: str, compile_body: Callable) -> Callable[[dict], Iterator]:
        """`{$for: "x in xs", $do: body}`: the body, compiled by `compile_body`, for each item."""
        var, source = self.loop(node["$for"], f"{where}.$for")
        body = compile_body(node.get("$do"), f"{where}.$do")
        return lambda ctx: (body({**ctx, var: item}) for item in source(ctx))

    def entries(self, node: dict, where: str, compile_body: Callable, omitted: Any) -> Callable[[dict], Iterator]:
        """`{$for: "x in xs", $key: KEY, $do: body}`: (key, body) for each item, the body
        compiled by `compile_body`; an item whose body is `omitted` has no entry (and its key
        is not rendered). A key must be a string."""
        var, source = self.loop(node["$for"], f"{where}.$for")
        key = self.value(node["$key"], f"{where}.$key")
        body = compile_body(node.get("$do"), f"{where}.$do")

        def run(ctx):
            for item in source(ctx):
                inner = {**ctx, var: item}
                value = body(inner)
                if value is not omitted:
                    try:
                        name = entry_key(key(inner))
                    except TypeError as exc:
                        raise ConfigError(f"{where}.$key: {exc}") from None
                    yield name, value
        return run

    def _if(self, node: dict, where: str) -> Node:
        test = self.value(node["$if"], f"{where}.$if")
        then = self.value(node.get("$then"), f"{where}.$then")
        other = self.value(node.get("$else", OMIT), f"{where}.$else")
        return lambda ctx: then(ctx) if test(ctx) else other(ctx)

    def steps(self, steps: list, where: str) -> tuple[Callable[[dict, list], Iterator], ...]:
        """A stream's steps as generated generator functions: of its events, of their SSE
        frames and of its marked events (llmsim.render.stepcodegen)."""
        return self.stepgen.generator(steps, where)


def _given(value, default):
    """`value`, or `default` when it is None or undefined (jinja's `default` also swallows 0)."""
    return default if value is None or isinstance(value, jinja2.Undefined) else value


def _tojson(value) -> str:
    return orjson.dumps(value).decode()


def snapshot_events(steps: list, where: str, found: dict[str | None, str] | None = None) -> dict[str | None, str]:
    """Event name (None: unnamed) -> the data key holding the response, of every step that
    declares `snapshot`; a step whose data is a mapping must have that key."""
    found = {} if found is None else found
    for i, step in enumerate(steps):
        at = f"{where}[{i}]"
        for key in ("steps", "else"):
            snapshot_events(step.get(key) or [], f"{at}.{key}", found)
        key = step.get("snapshot")
        if key is None:
            continue
        data = step.get("data")
        if isinstance(data, dict) and "$object" not in data and key not in data:
            raise ConfigError(f"{at}.snapshot: {key!r} is not a key of this step's data "
                              f"(its keys: {', '.join(map(str, data))})")
        name = step.get("event")
        if found.get(name, key) != key:
            raise ConfigError(f"{at}.snapshot: event {name!r} holds its snapshot under {found[name]!r} "
                              f"in another step; one event name, one snapshot key")
        found[name] = key
    return found


class Template:
    """One compiled template file. `snapshots`: event name (None: unnamed) -> the key of its
    data that holds the response object, for the events whose steps declare `snapshot`."""

    def __init__(self, name: str, body: Node | None, body_json, stream,
                 snapshots: dict[str | None, str] | None = None, variables: dict | None = None):
        self.name = name
        self.variables = variables or {}    # names every render sees (TemplateSet's `variables`)
        self._body = body
        self._body_json = body_json
        self._stream, self._frames, self._marked = stream or (None, None, None)
        self.snapshots = snapshots or {}

    def body(self, **ctx) -> Any:
        if self._body is None:
            raise ConfigError(f"template {self.name!r} has no body")
        return self._body({**self.variables, **ctx})

    def body_json(self, **ctx) -> bytes:
        """The body as JSON bytes: the same as serialising `body(**ctx)`, in one pass."""
        if self._body_json is None:
            raise ConfigError(f"template {self.name!r} has no body")
        ctx = {**self.variables, **ctx, "__memo": {}}
        return self._body_json(ctx)

    def events(self, **ctx) -> Iterator[Event]:
        """Render the stream lazily; `seq` counts JSON events from 0."""
        return self._render(self._stream, ctx)

    def frames(self, **ctx) -> Iterator[tuple[float, bytes]]:
        """The same stream as SSE: (due time, frame) per event, the frames those of
        `llmsim.render.sse.framed(self.events(**ctx))`, made without an `Event` each."""
        return self._render(self._frames, ctx)

    def marked(self, **ctx) -> Iterator[MarkedEvent]:
        """The same events, each with the `Role` its step declares (what is a delta, what is
        terminal, what holds the response)."""
        return self._render(self._marked, ctx)

    def _render(self, stream, ctx: dict) -> Iterator:
        if stream is None:
            raise ConfigError(f"template {self.name!r} has no stream")
        ctx = {**self.variables, **ctx, "__memo": {}}   # __memo: what one render computes once
        return stream(ctx, [0.0, 0])                     # (llmsim.render.jsoncodegen)


class TemplateSet:
    """Every template of a directory, compiled; `set["responses"]` is one file. `variables`:
    names every template sees besides its own (the simulator gives `settings`)."""

    def __init__(self, directory: Path, variables: dict | None = None):
        self.directory = Path(directory)
        files = sorted(self.directory.rglob("*.yaml"))
        if not files:
            raise ConfigError(f"{self.directory}: no *.yaml templates found")
        raw = {}
        for path in files:
            name = path.relative_to(self.directory).with_suffix("").as_posix()
            raw[name] = (path, datafiles.load(path, "template"))
        self.objects: dict[str, Node] = {}
        owners: dict[str, Path] = {}
        for path, doc in raw.values():
            for obj_name in (doc.get("objects") or {}):
                if obj_name in owners:
                    raise ConfigError(f"{path}: objects.{obj_name}: already defined in {owners[obj_name]}; "
                                      "object names are shared by all templates, rename one")
                owners[obj_name] = path
        # Objects may refer to each other in any order: compile lazily by name.
        pending = {obj: (path, doc["objects"][obj]) for name, (path, doc) in raw.items()
                   for obj in (doc.get("objects") or {})}
        compiler = Compiler(self.objects, {obj: value for obj, (_, value) in pending.items()})
        compiler.codegen.bound |= set().union(*(bound_names(doc) for _, doc in raw.values()))
        compiler.codegen.varying |= set().union(*(bound_names(doc, with_keys=False) for _, doc in raw.values()))
        for obj, (path, value) in pending.items():       # each checked on its own first,
            self.objects[obj] = compiler.value(value, f"{path}: objects.{obj}")
            compiler.json.objects[obj] = compiler.json.value(value, f"{path}: objects.{obj}")
        for obj, (path, value) in pending.items():       # ... before others inline it
            compiler.json_writer(value, f"{path}: objects.{obj}", name=obj)
        self.templates: dict[str, Template] = {}
        for name, (path, doc) in raw.items():
            body = body_json = stream = snapshots = None
            if "body" in doc:
                body = compiler.value(doc["body"], f"{path}: body")
                body_json = compiler.json_writer(doc["body"], f"{path}: body", once=True)
            if "stream" in doc:
                stream = compiler.steps(doc["stream"], f"{path}: stream")
                snapshots = snapshot_events(doc["stream"], f"{path}: stream")
            self.templates[name] = Template(name, body, body_json, stream, snapshots, variables)

    def __getitem__(self, name: str) -> Template:
        try:
            return self.templates[name]
        except KeyError:
            raise ConfigError(f"{self.directory}: no template {name}.yaml (have: "
                              f"{', '.join(sorted(self.templates))})") from None

    def __contains__(self, name: str) -> bool:
        return name in self.templates
