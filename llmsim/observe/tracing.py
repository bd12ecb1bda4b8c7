"""OpenTelemetry for generating requests: a SERVER span each, named and attributed as the GenAI
semantic conventions say, and the conventions' server metrics, sent over OTLP/HTTP (docs/tracing.md).

Off unless `otlp_endpoint` or the standard `OTEL_EXPORTER_OTLP_*ENDPOINT` variables ask for it:
`create` then returns None, nothing here runs and opentelemetry is never imported (the observer
tests one attribute per request). When on, the event loop only notes each generating request
(`Call.end` / `record_exchange`: one tuple of plain values appended to a bounded deque); llmsim.observe.otlp
ships them in batches to an exporter process (llmsim.observe.otlp_export, the only code that imports
opentelemetry), which turns them into spans and metric points and sends them. An incoming W3C `traceparent` makes the span its child
(same trace id, its span as parent); a `tracestate` is kept on the span. Provider, operation and
where a body keeps max_tokens and temperature, per API: llmsim/data/genai.yaml.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Mapping

from llmsim import datafiles
from llmsim.errors import ConfigError
from llmsim.observe import otlp

TRACEPARENT, TRACESTATE, USER_AGENT = b"traceparent", b"tracestate", b"user-agent"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                      "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
MAX_PATHS = 256         # request paths whose API is remembered
log = logging.getLogger("llmsim")


@dataclass(frozen=True, slots=True, eq=False)     # hashed by identity: one per API
class Api:
    """One API's names (llmsim/data/genai.yaml)."""
    name: str                                   # llmsim's: responses, chat, ... (stats' endpoint names)
    provider: str                               # gen_ai.provider.name
    operation: str                              # gen_ai.operation.name
    api_type: str | None                        # openai.api.type
    paths: tuple[str, ...]
    max_tokens: tuple[tuple[str, ...], ...]     # dotted paths into the body, split
    temperature: tuple[tuple[str, ...], ...]
    finish_from: str | None                     # choices | stop_reason | status
    rename: Mapping[str, str]


def load_apis(path) -> dict[str, Api]:
    doc = datafiles.load(path, "genai")["apis"]
    apis = {}
    for name, entry in doc.items():
        finish = entry.get("finish_reasons") or {}
        apis[name] = Api(name, entry["provider"], entry["operation"], entry.get("api_type"), tuple(entry["paths"]),
                         tuple(tuple(p.split(".")) for p in entry.get("max_tokens", ())),
                         tuple(tuple(p.split(".")) for p in entry.get("temperature", ())),
                         finish.get("from"), dict(finish.get("rename") or {}))
    return apis


# The record of one generating request, as the exporter reads it: one flat tuple of plain values,
# made in one step (cheap on the loop: no tuple inside it for the garbage collector to follow
# but a finish-reasons tuple when there are several; it keeps no plan alive): api, method, path,
# status, error, injected, wall (start, epoch s), duration (s), traceparent, tracestate, user
# agent (bytes or None), stream, delay (s before the plan's clock started), request model,
# response model, response id, input, output, reasoning and cached tokens (None without usage),
# finish reasons (a str for one, else a tuple), max_tokens, temperature, first token at, end at.
Record = tuple
_NOTHING: dict = {}


def _field(req: dict, keys, paths):
    """The first of a request's fields that is set: by top-level `keys` (read straight), else by `paths`."""
    if keys is None:
        return _first(req, paths)
    for key in keys:
        value = req.get(key)
        if value is not None:
            return value
    return None


def _first(body, paths):
    """The value at the first of `paths` (each a tuple of keys) the body has."""
    for path in paths:
        value = body
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            return value
    return None


def _keys(paths: tuple[tuple[str, ...], ...]) -> tuple[str, ...] | None:
    """The top-level keys `paths` name, when each names one (None: some path is nested)."""
    return tuple(path[0] for path in paths) if all(len(path) == 1 for path in paths) else None


def record_maker(api: Api):
    """The record (`Record`) of a planned answer of `api`'s, from its HTTP exchange
    (llmsim.observe.stats.Exchange): made once per API, with the body's fields and the finish
    reasons read the way `api` keeps them (the loop's whole share of a traced request: no
    call it can do without)."""
    name, source, rename = api.name, api.finish_from, api.rename
    max_tokens_paths, temperature_paths = api.max_tokens, api.temperature
    max_tokens_keys, temperature_keys = _keys(max_tokens_paths), _keys(temperature_paths)

    def make(ex, plan, duration: float, headers) -> Record:
        try:
            req = plan.req or _NOTHING
        except AttributeError:
            req = _NOTHING
        max_tokens = _field(req, max_tokens_keys, max_tokens_paths)
        temperature = _field(req, temperature_keys, temperature_paths)
        if type(max_tokens) is not int:
            max_tokens = None
        if temperature is not None:
            temperature = float(temperature) if type(temperature) in (int, float) else None
        if source == "choices":
            choices = plan.choices
            if len(choices) == 1:
                reasons = choices[0].finish_reason or ()
            else:
                reasons = tuple(c.finish_reason for c in choices if c.finish_reason)
            if rename:
                reasons = rename.get(reasons, reasons) if type(reasons) is str \
                    else tuple(rename.get(r, r) for r in reasons)
        elif source == "stop_reason":
            reasons = plan.stop_reason or ()
        elif source == "status":
            reasons = getattr(plan, "incomplete_reason", None) or getattr(plan, "status", None) or ()
        else:
            reasons = ()
        u = plan.usage
        if u is None:
            input_tokens = output = reasoning = cached = None
        else:
            input_tokens, output = u.input_tokens, u.output_tokens
            try:
                reasoning, cached = u.reasoning_tokens, u.cached_tokens
            except AttributeError:
                reasoning, cached = getattr(u, "reasoning_tokens", 0), getattr(u, "cached_tokens", 0)
        return (name, ex.method, ex.path, ex.status, ex.error, ex.injected, ex.wall, duration,
                headers.get(TRACEPARENT), headers.get(TRACESTATE), headers.get(USER_AGENT), ex.stream, ex.delay,
                req.get("model") or plan.model, plan.model, getattr(plan, "id", None), input_tokens, output,
                reasoning, cached, reasons, max_tokens, temperature, plan.first_token_at, plan.end_at)
    return make


def _record(head: tuple, found: tuple) -> Record:
    """A record from its first thirteen values and `facts`'."""
    model, response_model, response_id, usage, reasons, max_tokens, temperature, first_at, end_at = found
    return (*head, model, response_model, response_id, *(usage or (None, None, None, None)),
            reasons[0] if len(reasons) == 1 else reasons, max_tokens, temperature, first_at, end_at)


def facts(api: Api, plan, given: dict | None) -> tuple:
    """What the span and the metrics need of a planned answer: (request model, response model,
    response id, usage as (input, output, reasoning, cached) tokens, finish reasons, max_tokens,
    temperature, first token at, end at) (seconds after the plan's clock started; None without
    a plan). `given`: what the caller of `Tracing.start` said of the request, preferred."""
    if plan is None:
        if not given:
            return None, None, None, None, (), None, None, None, None
        return given["model"], None, None, None, (), given["max_tokens"], given["temperature"], None, None
    req = getattr(plan, "req", None) or {}
    max_tokens = _first(req, api.max_tokens) if api.max_tokens else None
    temperature = _first(req, api.temperature) if api.temperature else None
    model = req.get("model") or plan.model
    if given:
        model = given["model"] or model
        max_tokens = given["max_tokens"] if given["max_tokens"] is not None else max_tokens
        temperature = given["temperature"] if given["temperature"] is not None else temperature
    if type(max_tokens) is not int:
        max_tokens = None
    if temperature is not None:
        temperature = float(temperature) if type(temperature) in (int, float) else None
    source = api.finish_from
    if source == "choices":
        rename = api.rename
        reasons = tuple([rename.get(c.finish_reason, c.finish_reason) for c in plan.choices if c.finish_reason])
    elif source == "stop_reason":
        reasons = (plan.stop_reason,) if plan.stop_reason else ()
    elif source == "status":
        reason = getattr(plan, "incomplete_reason", None) or getattr(plan, "status", None)   # compaction: neither
        reasons = (reason,) if reason else ()
    else:
        reasons = ()
    u = plan.usage
    usage = (u.input_tokens, u.output_tokens, getattr(u, "reasoning_tokens", 0), getattr(u, "cached_tokens", 0)) \
        if u is not None else None
    return (model, plan.model, getattr(plan, "id", None), usage, reasons, max_tokens, temperature,
            plan.first_token_at, plan.end_at)


class Call:
    """One generating request being traced (`Tracing.start`): `set_plan` when its answer is
    planned, `end` when it has been answered (or failed)."""
    __slots__ = ("tracing", "api", "method", "path", "headers", "given", "start", "wall", "plan",
                 "stream", "delay")

    def __init__(self, tracing: "Tracing", api: Api | None, method: str, path: str, headers: Mapping,
                 given: dict | None):
        self.tracing, self.api, self.method, self.path, self.headers = tracing, api, method, path, headers
        self.given = given
        self.start, self.wall = time.perf_counter(), time.time()
        self.plan, self.stream, self.delay = None, False, 0.0

    def set_plan(self, plan, stream: bool = False, delay: float = 0.0) -> None:
        """The answer's plan (its id, model, usage, finish reasons and due times); `delay`: seconds
        before its clock started (the serving model's wait and prefill)."""
        self.plan, self.stream, self.delay = plan, stream, delay

    def end(self, status: int, error_type: str | None = None, injected: bool = False) -> None:
        """Answered with `status` (0: no answer); `error_type`: the error's code, if any."""
        api = self.api
        if api is None:
            return
        headers = self.headers
        self.tracing.exporter.offer(_record(
            (api.name, self.method, self.path, status, error_type, injected, self.wall,
             time.perf_counter() - self.start, headers.get(TRACEPARENT), headers.get(TRACESTATE),
             headers.get(USER_AGENT), self.stream, self.delay), facts(api, self.plan, self.given)))


class Tracing:
    """Made once per process by `create` (None when off); started and stopped with the server."""

    def __init__(self, exporter, apis: dict[str, Api]):
        self.exporter = exporter                # llmsim.observe.otlp.Exporter (or a test's fake)
        self.apis = apis
        self._endings = sorted(((end, api) for api in apis.values() for end in api.paths),
                               key=lambda pair: len(pair[0]), reverse=True)
        self._by_path: dict[str, Api | None] = {}
        self._make = {api: record_maker(api) for api in apis.values()}    # a planned answer's record
        self._offer = exporter.offer

    def serving(self) -> None:
        self.exporter.start()

    def stopped(self) -> None:
        """Send what is left (waits up to the exporter's timeout)."""
        self.exporter.stop()

    def api_of(self, path: str) -> Api | None:
        """The generating API a request path belongs to (None: not a generating request)."""
        try:
            return self._by_path[path]
        except KeyError:
            pass
        found = next((api for end, api in self._endings if path.endswith(end)), None)
        if len(self._by_path) < MAX_PATHS:
            self._by_path[path] = found
        return found

    def start(self, method: str, path: str, headers: Mapping[bytes, bytes], *, api: str | None = None,
              model: str | None = None, max_tokens: int | None = None,
              temperature: float | None = None) -> Call:
        """A request begins (`headers`: its headers by lowercase bytes name, as the front reads
        them; `api`: llmsim's name for it, else found from `path`). `model`, `max_tokens` and
        `temperature` as the request gives them (else read from the plan's request body)."""
        given = None
        if model is not None or max_tokens is not None or temperature is not None:
            given = {"model": model, "max_tokens": max_tokens, "temperature": temperature}
        return Call(self, self.apis.get(api) if api else self.api_of(path), method, path, headers, given)

    def record_exchange(self, ex, now: float) -> None:
        """llmsim.observe.observer's hook: an HTTP exchange (llmsim.observe.stats.Exchange) ended
        at `now` (perf_counter); noted when it was a generating request (planned, or failed on a
        generating API's path)."""
        plan = ex.plan
        api = self.apis.get(ex.endpoint) if plan is not None else self.api_of(ex.path)
        if api is None:
            return
        headers = ex.request_headers or _NOTHING
        try:
            if plan is not None:
                record = self._make[api](ex, plan, now - ex.start, headers)
            else:
                record = _record((api.name, ex.method, ex.path, ex.status, ex.error, ex.injected, ex.wall,
                                  now - ex.start, headers.get(TRACEPARENT), headers.get(TRACESTATE),
                                  headers.get(USER_AGENT), ex.stream, ex.delay), facts(api, None, None))
        except Exception:       # a plan of a shape genai.yaml does not foresee: never the request's end
            log.exception("OpenTelemetry: could not note a %s request", api.name)
            return
        self._offer(record)


def wanted(settings, environ: Mapping[str, str]) -> str | None:
    """What asks for OpenTelemetry (a setting's or variable's name), or None: off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if settings.otlp_endpoint:
        return "otlp_endpoint"
    return next((name for name in ENDPOINT_VARIABLES if environ.get(name)), None)


def create(settings, environ: Mapping[str, str] | None = None, *,
           instance_id: str | None = None) -> Tracing | None:
    """The process's tracing, or None when nothing asks for it. ConfigError (one line) when it
    is asked for but opentelemetry is not installed, or an OTEL_* variable is one llmsim cannot
    follow. `instance_id`: the resource's service.instance.id (default: host name and process id,
    unless OTEL_RESOURCE_ATTRIBUTES names one)."""
    environ = os.environ if environ is None else environ
    if not check(settings, environ):
        return None
    apis = load_apis(settings.data_file("genai.yaml"))
    return Tracing(otlp.Exporter(otlp.Config.load(settings, environ, instance_id or settings.instance_id), apis),
                   apis)


def check(settings, environ: Mapping[str, str] | None = None) -> bool:
    """Whether OpenTelemetry is asked for; ConfigError (one line) when it is but is not installed
    (`llmsim serve` asks before it binds its port)."""
    why = wanted(settings, os.environ if environ is None else environ)
    if why is None:
        return False
    absent = otlp.missing()
    if absent is not None:
        raise ConfigError(f"{why} asks for OpenTelemetry, which is not installed ({absent} is missing): "
                          "pip install 'llmsim[otel]', or unset it")
    return True
