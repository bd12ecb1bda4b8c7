"""A tiny OTLP/HTTP receiver for tests: POST /v1/traces and /v1/metrics (protobuf, gzip or not),
decoded with opentelemetry-proto into plain dicts a test can search."""
from __future__ import annotations

import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _attributes(kvs) -> dict:
    return {kv.key: _value(kv.value) for kv in kvs}


class Receiver:
    """`.url`: the base URL (OTEL_EXPORTER_OTLP_ENDPOINT); `.spans`, `.metrics`: what arrived."""

    def __init__(self):
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
        self.spans: list[dict] = []
        self.metrics: list[dict] = []
        self.requests: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.requests.append(self.path)
                if self.path == "/v1/traces":
                    message = ExportTraceServiceRequest()
                    message.ParseFromString(body)
                    receiver._spans(message)
                elif self.path == "/v1/metrics":
                    message = ExportMetricsServiceRequest()
                    message.ParseFromString(body)
                    receiver._metrics(message)
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _spans(self, message) -> None:
        for rs in message.resource_spans:
            resource = _attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for span in ss.spans:
                    self.spans.append({
                        "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(), "trace_state": span.trace_state,
                        "name": span.name, "kind": span.kind, "attributes": _attributes(span.attributes),
                        "events": [{"name": e.name, "time": e.time_unix_nano} for e in span.events],
                        "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                        "status": span.status.code, "scope": ss.scope.name, "resource": resource})

    def _metrics(self, message) -> None:
        for rm in message.resource_metrics:
            resource = _attributes(rm.resource.attributes)
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        self.metrics.append({"name": metric.name, "unit": metric.unit, "kind": kind,
                                             "attributes": _attributes(point.attributes),
                                             "count": getattr(point, "count", None),
                                             "sum": getattr(point, "sum", None), "resource": resource})

    def wait(self, condition, timeout: float = 30.0):
        """`condition(self)`'s first truthy value within `timeout` seconds (else its last)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = condition(self)
            if found:
                return found
            time.sleep(0.05)
        return condition(self)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
