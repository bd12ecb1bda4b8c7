"""One line per request: the JSONL ground-truth trace (`--trace FILE`) and the access log
(`--log-format text|json`, on stderr). Both are built only when switched on.

The trace holds what the simulator intended (TTFT, gaps, tokens from the plan) next to what
happened (status, fault, start and end wall times), so a benchmark client's measurements can
be checked against it. Lines are buffered and appended in one write (O_APPEND, so several
workers may share one file) at most `FLUSH_INTERVAL` seconds later and at exit.
"""
from __future__ import annotations

import asyncio
import atexit
import logging
import os
import re
import sys
from datetime import UTC, datetime

import orjson

from llmsim.observe.stats import Exchange, sent

FLUSH_INTERVAL = 0.2


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def gaps_summary(token_times: list) -> dict | None:
    """mean / p50 / max of the intended gaps between consecutive visible tokens, in ms."""
    gaps = sorted(b - a for times in token_times for a, b in zip(times, times[1:]))
    if not gaps:
        return None
    return {"mean": _ms(sum(gaps) / len(gaps)), "p50": _ms(gaps[len(gaps) // 2]), "max": _ms(gaps[-1])}


def record(ex: Exchange, end_wall: float) -> dict:
    """The trace line of one finished exchange."""
    plan = ex.plan
    line = {"id": ex.id, "endpoint": ex.endpoint, "method": ex.method, "path": ex.path,
            "status": ex.status, "model": None, "stream": ex.stream, "ttft_ms": None,
            "duration_ms": None, "gaps_ms": None, "tokens": None, "fault": ex.error,
            "injected": ex.injected, "start": round(ex.wall, 6), "end": round(end_wall, 6),
            "elapsed_ms": _ms(end_wall - ex.wall)}
    if plan is not None:
        out = sent(plan, ex.cut)        # a stream its client left: what it sent
        line.update(model=plan.model, ttft_ms=None if out.first is None else _ms(out.first + ex.delay),
                    duration_ms=_ms(out.end + ex.delay), gaps_ms=gaps_summary(out.times),
                    tokens={"prompt": plan.usage.input_tokens, "completion": out.completion,
                            "reasoning": out.reasoning})
    return line


class Trace:
    """Appends trace lines to a file, off the request path."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.pending: list[bytes] = []
        self.scheduled = False
        atexit.register(self.flush)

    def write(self, ex: Exchange, end_wall: float) -> None:
        self.pending.append(orjson.dumps(record(ex, end_wall), option=orjson.OPT_APPEND_NEWLINE))
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_later(FLUSH_INTERVAL, self.flush)

    def flush(self) -> None:
        self.scheduled = False
        if self.pending:
            data, self.pending = b"".join(self.pending), []
            os.write(self.fd, data)


class AccessLog:
    """One line per request on stderr, as text or JSON."""

    def __init__(self, fmt: str, stream=None):
        self.json = fmt == "json"
        self.stream = stream or sys.stderr

    def write(self, ex: Exchange, end_wall: float) -> None:
        line = record(ex, end_wall)
        if self.json:
            text = orjson.dumps(line).decode()
        else:
            stamp = datetime.fromtimestamp(line["start"], UTC).isoformat(timespec="milliseconds")
            tokens = line["tokens"] or {}
            text = (f'{stamp} {line["id"]} "{line["method"]} {line["path"]}" {line["status"]} '
                    f'{line["elapsed_ms"]}ms endpoint={line["endpoint"]} model={line["model"] or "-"} '
                    f'stream={str(line["stream"]).lower()} ttft_ms={line["ttft_ms"]} '
                    f'tokens={tokens.get("completion", "-")} fault={line["fault"] or "-"}')
        self.stream.write(text + "\n")
        self.stream.flush()


# Credentials never reach a log: the value of an Authorization (or x-api-key / api-key) header
# and any Bearer token in a log line read as [redacted] (e.g. the WebSocket library's debug
# log of an upgrade's request headers).
SECRET = re.compile(r"(?i)((?:authorization|x-api-key|api-key)\s*[:=]\s*)[^\r\n'\",}]+|(bearer\s+)[^\s'\",}]+")
LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "websockets", "llmsim")


class Redact(logging.Filter):
    """Rewrites a record whose text holds a credential (see SECRET)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:       # a record that cannot format passes as it is
            return True
        redacted = SECRET.sub(lambda m: (m.group(1) or m.group(2)) + "[redacted]", text)
        if redacted != text:
            record.msg, record.args = redacted, ()
        return True


def redact_credentials() -> None:
    """Add the Redact filter to the loggers a server logs through and to their handlers
    (once each; called once logging is configured)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for target in (logger, *logger.handlers):
            if not any(isinstance(f, Redact) for f in target.filters):
                target.addFilter(Redact())
