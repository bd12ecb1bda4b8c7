"""The server process's side of OpenTelemetry (llmsim.observe.tracing): what the OTEL_* variables
say, and the hand-over of the loop's records to an exporter process.

The loop appends each generating request's record (plain values only) to a bounded deque:
beyond `OTEL_BSP_MAX_QUEUE_SIZE` records are dropped and counted. A shipper thread sends them,
`marshal`led, in batches (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, at least every `OTEL_BSP_SCHEDULE_DELAY`
ms) through a pipe to a child process (`python -m llmsim.observe.otlp_export`), which keeps the metrics,
encodes the spans and posts them: the work a span costs, and opentelemetry itself, stay out of
the server process and off its core (docs/tracing.md, bench/otel_cost.py). The child ends when
the pipe closes (the server stopped, or died).
"""
from __future__ import annotations

import importlib.util
import logging
import marshal
import pickle
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping

from llmsim.errors import ConfigError

log = logging.getLogger("llmsim")
SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
            "parentbased_traceidratio")
NEEDED = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http", "opentelemetry.proto")


def missing() -> str | None:
    """The first module OpenTelemetry export needs that is not installed, or None."""
    for name in NEEDED:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except ModuleNotFoundError:
            return name
    return None


def _ms(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"environment: {name}={raw!r} is not a number of milliseconds") from None
    if value <= 0:
        raise ConfigError(f"environment: {name}={raw!r} must be more than 0 milliseconds")
    return value


def _headers(text: str) -> dict[str, str]:
    """OTEL_EXPORTER_OTLP_HEADERS: `name=value,...`, values URL-encoded."""
    found = {}
    for pair in text.split(","):
        name, sep, value = pair.partition("=")
        if sep and name.strip():
            found[urllib.parse.unquote(name.strip()).lower()] = urllib.parse.unquote(value.strip())
    return found


@dataclass
class Config:
    """What `otlp_endpoint` and the OTEL_* variables say, read once (plain values: it goes to the
    exporter process)."""
    traces_url: str | None
    metrics_url: str | None
    headers: dict = field(default_factory=dict)       # the traces request's extra headers
    timeout: float = 10.0                              # seconds per export request
    gzip: bool = False
    instance_id: str | None = None                     # service.instance.id, when the caller names one
    ratio: float = 1.0                                 # root spans sampled (trace id ratio)
    parent_based: bool = True                          # a remote parent's sampled flag decides
    delay: float = 5.0                                 # seconds between batches at most
    max_queue: int = 2048
    batch: int = 512
    metric_interval: float = 60.0
    server_address: str | None = None
    server_port: int | None = None

    @classmethod
    def load(cls, settings, environ: Mapping[str, str], instance_id: str | None = None) -> "Config":
        get = environ.get
        protocol = (get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or get("OTEL_EXPORTER_OTLP_PROTOCOL")
                    or "http/protobuf").strip()
        if protocol != "http/protobuf":
            raise ConfigError(f"environment: OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: llmsim sends OTLP over "
                              "http/protobuf only (set it to http/protobuf, and the endpoint to the "
                              "collector's HTTP port, e.g. 4318)")
        base = (settings.otlp_endpoint or get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318").rstrip("/")
        traces = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or f"{base}/v1/traces"
        metrics = get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or f"{base}/v1/metrics"
        if (get("OTEL_TRACES_EXPORTER") or "otlp").strip() == "none":
            traces = None
        if (get("OTEL_METRICS_EXPORTER") or "otlp").strip() == "none":
            metrics = None
        sampler = (get("OTEL_TRACES_SAMPLER") or "parentbased_always_on").strip()
        if sampler not in SAMPLERS:
            raise ConfigError(f"environment: OTEL_TRACES_SAMPLER={sampler!r} is not one of {', '.join(SAMPLERS)}")
        ratio = {"always_on": 1.0, "parentbased_always_on": 1.0}.get(sampler, 0.0)
        if sampler.endswith("traceidratio"):
            try:
                ratio = float(get("OTEL_TRACES_SAMPLER_ARG") or 1.0)
            except ValueError:
                raise ConfigError("environment: OTEL_TRACES_SAMPLER_ARG must be a number 0-1") from None
        compression = (get("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION") or get("OTEL_EXPORTER_OTLP_COMPRESSION")
                       or "none").strip().lower()
        try:
            timeout = float(get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or get("OTEL_EXPORTER_OTLP_TIMEOUT") or 10)
        except ValueError:
            raise ConfigError("environment: OTEL_EXPORTER_OTLP_TIMEOUT must be a number of seconds") from None
        headers = _headers(get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or get("OTEL_EXPORTER_OTLP_HEADERS") or "")
        return cls(traces, metrics, headers, timeout, compression == "gzip", instance_id,
                   min(max(ratio, 0.0), 1.0), sampler.startswith("parentbased"),
                   _ms(environ, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000,
                   int(_ms(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)),
                   int(_ms(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)),
                   _ms(environ, "OTEL_METRIC_EXPORT_INTERVAL", 60000) / 1000,
                   settings.host, settings.port or None)


def frame(data: bytes) -> bytes:
    """One message on the pipe: its length (4 bytes, little-endian), then it."""
    return struct.pack("<I", len(data)) + data


class Exporter:
    """The loop's `offer`, and the shipper thread and exporter process behind it."""

    def __init__(self, config: Config, apis: dict):
        self.config = config
        self.apis = apis                        # name -> tracing.Api, for the exporter process
        self.queue: deque = deque()
        self.dropped = 0                        # records beyond the queue's size
        self.wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen | None = None
        self._stopping = False

    # -- the event loop's side ---------------------------------------------------------------
    def offer(self, record: tuple) -> None:
        q = self.queue
        n = len(q)
        if n >= self.config.max_queue:
            self.dropped += 1
            return
        q.append(record)
        if n + 1 == self.config.batch:
            self.wake.set()

    def start(self) -> None:
        """Start the exporter process and the shipper thread (the server is serving)."""
        if self._thread is not None:
            return
        # `python -m llmsim.observe.otlp_export`: its first message is (config, apis), pickled
        self._process = subprocess.Popen([sys.executable, "-m", "llmsim.observe.otlp_export"],
                                         stdin=subprocess.PIPE, close_fds=True)
        self._stopping = False
        self._thread = threading.Thread(target=self._ship, args=(pickle.dumps((self.config, self.apis)),),
                                        name="llmsim-otel", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ship what is queued, close the pipe and let the exporter process send the rest
        (waits up to the export timeout)."""
        if self._thread is None:
            return
        self._stopping = True
        self.wake.set()
        deadline = time.monotonic() + self.config.timeout
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self._thread = None
        try:
            self._process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    # -- the shipper thread ------------------------------------------------------------------
    def _ship(self, first: bytes) -> None:
        q, pipe, config = self.queue, self._process.stdin, self.config
        broken = False
        try:
            pipe.write(frame(first))
            pipe.flush()
        except OSError as exc:
            broken = self._broken(exc)
        while True:
            self.wake.wait(config.delay)
            self.wake.clear()
            stopping = self._stopping
            while q and not broken:
                batch = [q.popleft() for _ in range(min(len(q), config.batch))]
                try:
                    data = marshal.dumps(batch)
                except ValueError:                          # a value of a type not foreseen
                    log.exception("OpenTelemetry: a batch of records could not be shipped")
                    continue
                try:
                    pipe.write(frame(data))
                    pipe.flush()
                except OSError as exc:                      # the exporter process is gone
                    broken = self._broken(exc)
            if broken:
                q.clear()
            if stopping:
                try:
                    pipe.close()
                except OSError:
                    pass
                return

    @staticmethod
    def _broken(exc: OSError) -> bool:
        log.warning("OpenTelemetry: the exporter process ended (%s); spans and metrics are no longer sent", exc)
        return True
