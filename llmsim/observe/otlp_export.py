"""The exporter process of llmsim.observe.otlp (spawned when OpenTelemetry is on; the only code
that imports opentelemetry): batches of records from the pipe become the GenAI server metrics
and OTLP spans.

Its main thread reads the pipe, adds each record to the metrics and encodes the sampled ones
as spans; a sender thread posts each batch and, every `OTEL_METRIC_EXPORT_INTERVAL` ms, the
metrics, so a slow collector never holds up the reading (beyond `SENDS_QUEUED` batches waiting,
a batch is dropped). A span is the concatenation of two protobuf encodings of `Span` (which
protobuf merges): what requests alike share (name, attributes, status; built once with
opentelemetry-proto's classes and cached per shape) and what each has of its own (ids, times,
response id, usage), framed here; the SDK's span objects and encoder cost more per span than
llmsim spends on a request (docs/tracing.md). Metrics are aggregated here and sent as
opentelemetry-sdk `MetricsData` by its OTLP metric exporter. The process (`python -m llmsim.observe.otlp_export`, started by
llmsim.observe.otlp) reads length-framed messages on stdin: (config, apis) pickled, then batches of
records marshalled; it ends when the pipe closes.
"""
from __future__ import annotations

import gzip
import http.client
import logging
import marshal
import os
import pickle
import queue
import random
import select
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse
from bisect import bisect_left

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PbResource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.metrics.export import (AggregationTemporality, Histogram, HistogramDataPoint, Metric,
                                              MetricsData, ResourceMetrics, ScopeMetrics)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope as SdkScope

from llmsim import __version__

log = logging.getLogger("llmsim")
SCOPE = "llmsim"
# bucket bounds the conventions give (gen-ai-metrics.md)
DURATION_BOUNDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BOUNDS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
MAX_SHAPES = 4096       # cached span prefixes (distinct APIs, models, statuses, finish reasons, ...)
SENDS_QUEUED = 8        # batches waiting for the sender beyond which a batch is dropped


def resource(instance_id: str | None = None) -> Resource:
    """The SDK's resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, with llmsim's
    service name, version and an instance id where they name none."""
    found = Resource.create({})
    attrs = found.attributes
    own = {}
    if attrs.get("service.name", "unknown_service").startswith("unknown_service"):
        own["service.name"] = "llmsim"
    if "service.version" not in attrs:
        own["service.version"] = __version__
    if instance_id is not None or "service.instance.id" not in attrs:
        own["service.instance.id"] = instance_id or f"{socket.gethostname()}-{os.getpid()}"
    return found.merge(Resource(own)) if own else found


# -- protobuf framing of what differs per span -------------------------------------------------
_pack64 = struct.Struct("<Q").pack
_packd = struct.Struct("<d").pack


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:                      # a span's length, mostly
        return bytes(((n & 0x7f) | 0x80, n >> 7))
    out = bytearray()
    while n > 0x7f:
        out.append((n & 0x7f) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag + _varint(len(payload)) + payload


def _key(name: str) -> bytes:
    return _field(b"\x0a", name.encode())


K_RESPONSE_ID = _key("gen_ai.response.id")
K_INPUT, K_OUTPUT = _key("gen_ai.usage.input_tokens"), _key("gen_ai.usage.output_tokens")
K_REASONING = _key("gen_ai.usage.reasoning.output_tokens")
K_CACHED = _key("gen_ai.usage.cache_read.input_tokens")
K_TTFC = _key("gen_ai.response.time_to_first_chunk")
FIRST_TOKEN_EVENT = _field(b"\x12", b"gen_ai.first_token")     # Event.name
_times = struct.Struct("<BQBQ").pack      # Span.start_time_unix_nano (9), end_time_unix_nano (10)
# Span.flags (field 16, fixed32): sampled, and whether the parent is remote (known: 0x100; is: 0x200)
FLAGS_LOCAL, FLAGS_REMOTE = b"\x85\x01" + struct.pack("<I", 0x101), b"\x85\x01" + struct.pack("<I", 0x301)


def _kv_str(key: bytes, value: str) -> bytes:
    return _field(b"\x4a", key + _field(b"\x12", _field(b"\x0a", value.encode())))


def _kv_int(key: bytes, value: int) -> bytes:
    return _field(b"\x4a", key + _field(b"\x12", b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)))


def _kv_str_prefix(key: bytes, length: int) -> bytes:
    """What `_kv_str(key, value)` puts before a value of `length` bytes."""
    return _kv_str(key, "\0" * length)[:-length]


def _kv_double(key: bytes, value: float) -> bytes:
    return _field(b"\x4a", key + _field(b"\x12", b"\x21" + _packd(value)))


def _any(value) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, (tuple, list)):
        return AnyValue(array_value=ArrayValue(values=[_any(v) for v in value]))
    return AnyValue(string_value=str(value))


def _attributes(pairs) -> list[KeyValue]:
    return [KeyValue(key=k, value=_any(v)) for k, v in pairs if v is not None]


def parse_traceparent(value: bytes | None) -> tuple[bytes, bytes, int] | None:
    """(trace id, parent span id, flags) of a valid W3C traceparent header, else None."""
    if not value or len(value) < 55:
        return None
    try:
        text = value.decode("ascii").strip()
        version, trace, span, flags = text.split("-")[:4]
        if len(version) != 2 or version == "ff" or len(trace) != 32 or len(span) != 16 or len(flags) != 2:
            return None
        if (version == "00" and len(text) != 55) or text != text.lower():
            return None
        trace_id, span_id = bytes.fromhex(trace), bytes.fromhex(span)
        if trace_id == bytes(16) or span_id == bytes(8):
            return None
        return trace_id, span_id, int(flags, 16)
    except ValueError:
        return None


class Hist:
    __slots__ = ("counts", "sum", "count", "min", "max")

    def __init__(self, bounds):
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self.min = float("inf")
        self.max = float("-inf")

    def add(self, value: float, bounds) -> None:
        self.counts[bisect_left(bounds, value)] += 1
        self.sum += value
        self.count += 1
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value


METRICS = (   # name, unit, description, bounds
    ("gen_ai.server.request.duration", "s", "Generative AI server request duration such as time-to-last "
     "byte or last output token.", DURATION_BOUNDS),
    ("gen_ai.server.time_to_first_token", "s", "Time to generate first token for successful responses.",
     TTFT_BOUNDS),
    ("gen_ai.server.time_per_output_token", "s", "Time per output token generated after the first token "
     "for successful responses.", TPOT_BOUNDS),
    ("gen_ai.server.token.usage", "{token}", "Number of input and output tokens used (gen_ai.client."
     "token.usage's shape, as the server counted them).", TOKEN_BOUNDS),
)


class Metrics:
    """Cumulative histograms per metric and attribute set (owned by the processor thread)."""

    def __init__(self, started_ns: int):
        self.started = started_ns
        self.series: list[dict[tuple, Hist]] = [{} for _ in METRICS]

    def hist(self, index: int, attrs: tuple) -> Hist:
        """The histogram of metric `index` (METRICS) for these attributes."""
        series = self.series[index]
        found = series.get(attrs)
        if found is None:
            found = series[attrs] = Hist(METRICS[index][3])
        return found

    def data(self, resource: Resource, now_ns: int) -> MetricsData | None:
        metrics = []
        for (name, unit, description, bounds), series in zip(METRICS, self.series):
            if not series:
                continue
            points = [HistogramDataPoint(attributes=dict(attrs), start_time_unix_nano=self.started,
                                         time_unix_nano=now_ns, count=h.count, sum=h.sum,
                                         bucket_counts=list(h.counts), explicit_bounds=list(bounds),
                                         min=h.min, max=h.max) for attrs, h in series.items()]
            metrics.append(Metric(name=name, description=description, unit=unit,
                                  data=Histogram(data_points=points,
                                                 aggregation_temporality=AggregationTemporality.CUMULATIVE)))
        if not metrics:
            return None
        return MetricsData(resource_metrics=[ResourceMetrics(
            resource=resource, scope_metrics=[ScopeMetrics(scope=SdkScope(SCOPE, __version__), metrics=metrics,
                                                           schema_url="")], schema_url="")])


def _read(fd: int, n: int) -> bytes:
    """Exactly `n` bytes from `fd` (b"" at its end)."""
    chunks, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return b""
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _message(fd: int) -> bytes | None:
    """The next message on the pipe (llmsim.observe.otlp.frame); None at its end."""
    head = _read(fd, 4)
    if not head:
        return None
    return _read(fd, struct.unpack("<I", head)[0]) or None


def main() -> None:
    """`python -m llmsim.observe.otlp_export`: messages on stdin until it closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C: the server's to handle; its end closes the pipe
    fd = sys.stdin.fileno()
    first = _message(fd)
    if first is None:
        return
    config, apis = pickle.loads(first)
    processor = Processor(config, apis)
    sender = threading.Thread(target=processor.send_loop, name="llmsim-otel-send", daemon=True)
    sender.start()
    next_metrics = time.monotonic() + config.metric_interval
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], max(0.0, next_metrics - time.monotonic()))
            if ready:
                data = _message(fd)
                if data is None:
                    break
                processor.drain(marshal.loads(data))
            if time.monotonic() >= next_metrics:
                next_metrics = time.monotonic() + config.metric_interval
                processor.queue_send(processor.send_metrics, processor.metrics.data(processor.resource, time.time_ns()))
    finally:
        processor.queue_send(processor.send_metrics, processor.metrics.data(processor.resource, time.time_ns()))
        processor.queue_send(None, None, block=True)       # the sender's last item
        sender.join(config.timeout)
        if processor.metric_exporter is not None:
            processor.metric_exporter.shutdown()


class Processor:
    def __init__(self, config, apis: dict, rng: random.Random | None = None):
        self.config = config
        self.apis = apis
        self.rng = rng or random.Random()
        self.sends: queue.Queue = queue.Queue(SENDS_QUEUED)
        self.shapes: dict[tuple, tuple] = {}
        self.usages: dict[tuple, bytes] = {}
        self.id_prefixes: dict[int, bytes] = {}     # gen_ai.response.id's encoding before the id, by its length
        self.metrics = Metrics(time.time_ns())
        self.metric_exporter = None
        if config.metrics_url:
            self.metric_exporter = OTLPMetricExporter(endpoint=config.metrics_url)
        self.resource = resource(config.instance_id)
        self._head = self._request_head()
        self._failing: str | None = None
        self._connection: http.client.HTTPConnection | None = None     # the sender's
        self._ratio_bound = TraceIdRatioBased.get_bound_for_rate(config.ratio)

    def drain(self, records: list) -> None:
        """Every record into the metrics, the sampled ones into span batches."""
        batch, spans = self.config.batch, []
        traces = self.config.traces_url is not None
        for record in records:
            try:
                span = self.record(record)
            except Exception:       # a plan of a shape not foreseen: never the thread's end
                log.exception("OpenTelemetry: could not record a request")
                continue
            if span is not None and traces:
                spans.append(span)
                if len(spans) >= batch:
                    self.queue_send(self.send_spans, spans)
                    spans = []
        if spans:
            self.queue_send(self.send_spans, spans)

    def record(self, record: tuple) -> bytes | None:
        """Add one request to the metrics; its span when it is sampled, encoded as a field of
        ScopeSpans (`spans_request` joins them)."""
        (api, method, path, status, error, injected, wall, duration, traceparent, tracestate, agent, stream,
         delay, model, response_model, response_id, input_tokens, output, reasoning, cached, reasons, max_tokens,
         temperature, first_at, end_at) = record         # llmsim.observe.tracing.Record
        usage = None if input_tokens is None else (input_tokens, output, reasoning, cached)
        api = self.apis[api]
        if error is None and (status >= 400 or not status):
            error = str(status) if status else "no_response"
        key = (api, method, path, status, error, injected, model, response_model, reasons, max_tokens,
               temperature, stream, agent)
        shape = self.shapes.get(key)
        if shape is None:
            shape = self._shape(*key)
            if len(self.shapes) < MAX_SHAPES:
                self.shapes[key] = shape
        head, duration_hist, ttft_hist, tpot_hist, input_hist, output_hist = shape
        duration_hist.add(duration, DURATION_BOUNDS)
        output = 0
        if usage is not None:
            input_tokens, output, reasoning, cached = usage
            input_hist.add(input_tokens, TOKEN_BOUNDS)
            output_hist.add(output, TOKEN_BOUNDS)
        ttft = None
        if first_at is not None:                # a planned answer
            ttft = first_at + delay
            if error is None and output:
                ttft_hist.add(ttft, TTFT_BOUNDS)
                if output > 1 and end_at:
                    tpot_hist.add((end_at - first_at) / (output - 1), TPOT_BOUNDS)
        if self.config.traces_url is None:
            return None
        # the span
        ids = self.rng.randbytes(24)            # a trace id (unless the parent's) and a span id
        parent = parse_traceparent(traceparent) if traceparent else None
        if parent is not None:
            trace_id = parent[0]
            if self.config.parent_based:
                if not parent[2] & 1:
                    return None
            elif self._ratio_bound <= int.from_bytes(trace_id[8:], "big"):
                return None
        else:
            trace_id = ids[:16]
            if self._ratio_bound <= int.from_bytes(trace_id[8:], "big"):
                return None
        start = int(wall * 1e9)
        parts = [head, b"\x0a\x10", trace_id, b"\x12\x08", ids[16:],
                 _times(0x39, start, 0x41, start + int(duration * 1e9))]
        if parent is not None:
            parts += (FLAGS_REMOTE, b"\x22\x08", parent[1])
            if tracestate:
                parts.append(_field(b"\x1a", tracestate))
        else:
            parts.append(FLAGS_LOCAL)
        if response_id:
            value = response_id.encode()
            prefix = self.id_prefixes.get(len(value))
            if prefix is None:
                prefix = self.id_prefixes[len(value)] = _kv_str_prefix(K_RESPONSE_ID, len(value))
            parts += (prefix, value)
        if usage is not None:
            parts.append(self._usage(usage))
        if ttft is not None and output:
            if stream:
                parts.append(_kv_double(K_TTFC, ttft))
            parts.append(_field(b"\x5a", b"\x09" + _pack64(start + int(ttft * 1e9)) + FIRST_TOKEN_EVENT))
        span = b"".join(parts)
        return b"\x12" + _varint(len(span)) + span       # framed as ScopeSpans.spans

    def _usage(self, usage: tuple) -> bytes:
        """The usage attributes, encoded (answers alike share them: cached)."""
        found = self.usages.get(usage)
        if found is None:
            input_tokens, output, reasoning, cached = usage
            found = _kv_int(K_INPUT, input_tokens) + _kv_int(K_OUTPUT, output)
            if reasoning:
                found += _kv_int(K_REASONING, reasoning)
            if cached:
                found += _kv_int(K_CACHED, cached)
            if len(self.usages) < MAX_SHAPES:
                self.usages[usage] = found
        return found

    def _shape(self, api, method, path, status, error, injected, model, response_model, reasons, max_tokens,
               temperature, stream, agent) -> tuple:
        """What requests alike share: their span's name, kind, attributes and status encoded
        once, and their metrics' histograms (duration, ttft, tpot, input and output tokens)."""
        config = self.config
        if type(reasons) is str:                # one finish reason (llmsim.observe.tracing.Record)
            reasons = (reasons,)
        route = path
        if "/models/" in path and ":" in path.rsplit("/", 1)[-1]:       # Gemini: the model is in the path
            head, _, tail = path.rpartition("/models/")
            route = f"{head}/models/{{model}}:{tail.split(':', 1)[1]}"
        pairs = [("gen_ai.operation.name", api.operation), ("gen_ai.provider.name", api.provider),
                 ("gen_ai.request.model", model), ("gen_ai.response.model", response_model),
                 ("gen_ai.response.finish_reasons", list(reasons) or None),
                 ("gen_ai.request.max_tokens", max_tokens), ("gen_ai.request.temperature", temperature),
                 ("gen_ai.request.stream", bool(stream)), ("openai.api.type", api.api_type),
                 ("error.type", error), ("llmsim.fault.injected", True if injected else None),
                 ("http.request.method", method), ("url.path", path), ("url.scheme", "http"),
                 ("http.route", route), ("http.response.status_code", status or None),
                 ("network.protocol.name", "http"), ("server.address", config.server_address),
                 ("server.port", config.server_port),
                 ("user_agent.original", agent.decode("latin-1") if agent else None)]
        name = f"{api.operation} {model}" if model else api.operation
        failed = error is not None and (status >= 500 or not status or injected)
        span = Span(name=name, kind=Span.SPAN_KIND_SERVER, attributes=_attributes(pairs),
                    status=Status(code=Status.STATUS_CODE_ERROR, message=error) if failed else None)
        metrics = self.metrics
        attrs = tuple((k, v) for k, v in pairs[:4] if v is not None)     # the metrics' attributes
        return (span.SerializeToString(), metrics.hist(0, attrs + (("error.type", error),) if error else attrs),
                metrics.hist(1, attrs), metrics.hist(2, attrs), metrics.hist(3, attrs + (("gen_ai.token.type", "input"),)),
                metrics.hist(3, attrs + (("gen_ai.token.type", "output"),)))

    def _request_head(self) -> tuple[bytes, bytes]:
        """ExportTraceServiceRequest's framing around the spans: resource and scope."""
        res = PbResource(attributes=_attributes(self.resource.attributes.items())).SerializeToString()
        scope = InstrumentationScope(name=SCOPE, version=__version__).SerializeToString()
        return _field(b"\x0a", res), _field(b"\x0a", scope)

    def spans_request(self, spans: list[bytes]) -> bytes:
        """ExportTraceServiceRequest { ResourceSpans { resource, ScopeSpans { scope, spans } } },
        each span framed by `record`: joined in one copy."""
        resource, scope = self._head
        size = len(scope) + sum(map(len, spans))
        scope_spans = b"\x12" + _varint(size)
        return b"".join([b"\x0a", _varint(len(resource) + len(scope_spans) + size), resource, scope_spans, scope,
                         *spans])

    # -- the sender thread -------------------------------------------------------------------
    def queue_send(self, action, payload, block: bool = False) -> None:
        if action is not None and payload is None:
            return
        try:
            self.sends.put((action, payload), block=block, timeout=self.config.timeout if block else None)
        except queue.Full:
            self._failed("the collector is slower than the spans arrive: a batch was dropped")

    def send_loop(self) -> None:
        while True:
            action, payload = self.sends.get()
            if action is None:
                return
            try:
                action(payload)
            except Exception as exc:
                self._failed(f"{type(exc).__name__}: {exc}")

    def send_spans(self, spans: list[bytes]) -> None:
        """POST one batch on a kept-alive connection (made again after an error)."""
        config = self.config
        data = self.spans_request(spans)
        headers = {"Content-Type": "application/x-protobuf", **config.headers}
        if config.gzip:
            data = gzip.compress(data)
            headers["Content-Encoding"] = "gzip"
        url = urllib.parse.urlsplit(config.traces_url)
        for attempt in (1, 2):          # a kept-alive connection the collector closed: once more, anew
            fresh = self._connection is None
            if fresh:
                kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
                self._connection = kind(url.netloc, timeout=config.timeout)
            try:
                self._connection.request("POST", url.path or "/", data, headers)
                response = self._connection.getresponse()
                response.read()
            except (http.client.HTTPException, OSError):
                self._connection.close()
                self._connection = None
                if fresh or attempt == 2:
                    raise
                continue
            if response.will_close:
                self._connection.close()
                self._connection = None
            break
        if response.status >= 300:
            raise OSError(f"HTTP {response.status} {response.reason}")
        self._recovered()

    def send_metrics(self, data: MetricsData) -> None:
        if self.metric_exporter is not None:
            self.metric_exporter.export(data, timeout_millis=self.config.timeout * 1000)

    def _failed(self, why: str) -> None:
        if self._failing != why:        # once per cause, not once per batch
            self._failing = why
            log.warning("OpenTelemetry: could not export to %s: %s", self.config.traces_url, why)

    def _recovered(self) -> None:
        if self._failing is not None:
            self._failing = None
            log.warning("OpenTelemetry: exporting to %s again", self.config.traces_url)


if __name__ == "__main__":
    main()
