"""Live counters behind /llmsim/stats and /metrics: cheap to feed, merged across workers.

Fed by llmsim.observe.observer (one call when an HTTP request or WebSocket connection
starts and one when it ends), by the few places that know the plan (`record`, `error`)
and by the SSE pacer (`lateness`, once per written batch). State is plain ints and
fixed-bucket histograms, so a request costs a few dozen increments and no allocation per
token. `snapshot()` is that state as plain data; under `--workers N` each worker writes its
snapshot to `stats_dir` every `SHARE_INTERVAL` seconds and whichever worker answers merges
its own live snapshot with the others' files (`statsview.gather`). The snapshot is taken on
the event loop; the file is written and renamed by a thread of its own, because the rename
can block: replacing a file frees the old one's blocks, and on a filesystem mounted with
`discard` ext4 waits for the device there, every stream of the worker late by as much.

Requests are the API's: /llmsim/*, /metrics and /health are not counted.
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import time
from bisect import bisect_left, bisect_right
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import orjson

MAX_MODELS = 50           # per-model slots; later names share the "other" slot
OTHER_MODEL = "other"
RING = 64                 # seconds of per-second history (rates and sparklines)
SHARE_INTERVAL = 0.25     # seconds between snapshot files under --workers
WEBSOCKET = "websocket"


def _bounds() -> tuple[float, ...]:
    mantissas = (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.8, 2.0, 2.2, 2.5, 2.8, 3.0, 3.5, 4.0, 4.5,
                 5.0, 5.5, 6.0, 7.0, 7.5, 8.0, 9.0)
    return tuple(round(m * 10.0 ** e, 9) for e in range(-5, 4) for m in mantissas) + (1e4,)


BOUNDS = _bounds()        # histogram upper bounds in seconds (10 us .. 10,000 s, <= 17% apart)


class Histogram:
    """Counts and sums per fixed bucket (`BOUNDS`, then +Inf), and the largest value.

    The sum per bucket lets percentiles land on the values seen (exactly, when a bucket
    holds one value) rather than on bucket edges."""
    __slots__ = ("counts", "sums", "max")

    def __init__(self):
        self.counts = [0] * (len(BOUNDS) + 1)
        self.sums = [0.0] * (len(BOUNDS) + 1)
        self.max = 0.0

    def observe(self, seconds: float, n: int = 1, _bounds=BOUNDS) -> None:
        i = bisect_left(_bounds, seconds)
        self.counts[i] += n
        self.sums[i] += seconds * n
        if seconds > self.max:
            self.max = seconds

    def observe_gaps(self, times) -> None:
        """One observation per gap between consecutive due times."""
        if len(times) < 2:
            return
        counts, sums, bounds = self.counts, self.sums, BOUNDS
        hi = self.max
        prev = times[0]
        for t in times[1:]:
            gap = t - prev
            i = bisect_left(bounds, gap)
            counts[i] += 1
            sums[i] += gap
            if gap > hi:
                hi = gap
            prev = t
        self.max = hi

    def snapshot(self) -> dict:
        sums = self.sums
        return {"counts": [[i, c, sums[i]] for i, c in enumerate(self.counts) if c],
                "sum": sum(sums), "max": self.max}


class Lateness(Histogram):
    """The SSE pacer's histogram, fed once per written batch (50,000 times a second with a
    thousand paced streams). A value is appended to `pending` (no bucket search, no call
    per value) and the pending values are counted in one pass, sorted and
    merged with the bucket bounds, once `BATCH` have gathered (`add`) or when read."""
    __slots__ = ("pending",)
    BATCH = 4096

    def __init__(self):
        super().__init__()
        self.pending: list[float] = []

    def add(self, seconds: float) -> None:
        """Observe `seconds` later (what the pacer does inline, `pending` and `BATCH`)."""
        pending = self.pending
        pending.append(seconds)
        if len(pending) >= self.BATCH:
            self.count_pending()

    def count_pending(self) -> None:
        pending = self.pending
        if not pending:
            return
        pending.sort()
        counts, sums, bounds = self.counts, self.sums, BOUNDS
        i, last = 0, len(bounds)
        for seconds in pending:
            while i < last and bounds[i] < seconds:     # bisect_left, values in order
                i += 1
            counts[i] += 1
            sums[i] += seconds
        if pending[-1] > self.max:
            self.max = pending[-1]
        pending.clear()

    def observe(self, seconds: float, n: int = 1, _bounds=BOUNDS) -> None:
        self.count_pending()
        super().observe(seconds, n)

    def snapshot(self) -> dict:
        self.count_pending()
        return super().snapshot()


class Ring:
    """Per-second counts (requests, output tokens, errors) for the last `RING` wall seconds."""
    __slots__ = ("stamps", "requests", "tokens", "errors")

    def __init__(self):
        self.stamps = [-1] * RING
        self.requests = [0] * RING
        self.tokens = [0] * RING
        self.errors = [0] * RING

    def clear(self, i: int, second: int) -> None:
        self.stamps[i] = second
        self.requests[i] = self.tokens[i] = self.errors[i] = 0

    def add(self, second: int, requests: int, tokens: int, errors: int) -> None:
        i = second % RING
        if self.stamps[i] != second:
            self.clear(i, second)
        self.requests[i] += requests
        self.tokens[i] += tokens
        self.errors[i] += errors

    def snapshot(self) -> dict:
        return {str(s): [self.requests[i], self.tokens[i], self.errors[i]]
                for i, s in enumerate(self.stamps) if s >= 0}


class ModelStats:
    """One model's counters and simulated-timing histograms. Answers with no simulated time
    at all (e.g. `--profile instant`) are only counted (`instant`): they join the TTFT and
    duration histograms' zero bucket in `snapshot`, and have no inter-token gaps to report.
    So the benchmark case costs a few increments."""
    __slots__ = ("requests", "prompt", "completion", "reasoning", "running", "ttft", "itl", "e2e",
                 "instant")

    def __init__(self):
        self.requests = self.prompt = self.completion = self.reasoning = self.running = 0
        self.instant = 0
        self.ttft, self.itl, self.e2e = Histogram(), Histogram(), Histogram()

    def snapshot(self) -> dict:
        hists = {"itl": self.itl.snapshot()}
        for name, hist, zeros in (("ttft", self.ttft, self.instant), ("e2e", self.e2e, self.instant)):
            snap = hist.snapshot()
            if zeros:
                counts = dict((i, [i, c, total]) for i, c, total in snap["counts"])
                counts.setdefault(0, [0, 0, 0.0])[1] += zeros
                snap["counts"] = sorted(counts.values())
            hists[name] = snap
        return {"requests": self.requests, "prompt": self.prompt, "completion": self.completion,
                "reasoning": self.reasoning, "running": self.running, **hists}


class Exchange:
    """One HTTP request or WebSocket connection, as the observer and the handlers see it."""
    __slots__ = ("id", "kind", "method", "path", "endpoint", "start", "wall", "status", "plan",
                 "stream", "error", "injected", "model", "stats", "turns", "token", "request_headers",
                 "delay", "cut")

    def __init__(self, request_id: str, kind: str, method: str, path: str, endpoint: str,
                 stats: "Stats | None" = None):
        self.id, self.kind, self.method, self.path, self.endpoint = request_id, kind, method, path, endpoint
        self.stats = stats
        self.start = time.perf_counter()
        self.wall = time.time()
        self.status = 0                 # 0 until the response starts (or if it never does)
        self.plan = self.error = self.model = None
        self.stream = self.injected = False
        self.turns = 0                  # WebSocket turns traced so far
        self.token = None               # resets llmsim.observe.stats.CURRENT when the exchange ends
        self.request_headers = None     # the request's headers, {name: value} (bytes), as the front read them
        self.delay = 0.0                # seconds before the plan's clock started (the serving model's wait and prefill)
        self.cut = None                 # a stream its client left: seconds into the plan when it did

    def left(self, cut: float) -> None:
        """Its client left its stream `cut` seconds into the plan: stats count what was sent."""
        self.cut = cut


CURRENT: contextvars.ContextVar[Exchange | None] = contextvars.ContextVar("llmsim_exchange", default=None)


def current() -> Exchange | None:
    """The exchange being served (None outside a request)."""
    return CURRENT.get()


def fault_injected(kind: str) -> None:
    """A simulated fault of `kind` was chosen for the current request or WebSocket turn
    (called by `llmsim.faults.catalogue`, once per fault, whatever it then does)."""
    ex = CURRENT.get()
    if ex is not None and ex.stats is not None:
        ex.stats.error(kind, injected=True)


def output_tokens(usage) -> tuple[int, int]:
    """(visible completion tokens, reasoning tokens), whatever the usage semantics."""
    reasoning = usage.reasoning_tokens
    return usage.total_tokens - usage.input_tokens - reasoning, reasoning


class Sent(NamedTuple):
    """What a plan's answer sent: all of it, or a stream's part before its client left."""
    completion: int             # visible completion tokens
    reasoning: int
    first: float | None         # the first token's due time (None: none was sent)
    end: float                  # when the answer ended
    times: list                 # the sent visible tokens' due times, per item (Plan.token_times)


def sent(plan, cut: float | None = None) -> Sent:
    """What `plan` sent when its stream was cut `cut` seconds into it (None: not cut), as an
    engine counts what it generated before an abort: the visible tokens due by then (tokens
    not in `token_times`, function-call arguments, in proportion), reasoning in proportion
    to the time to the first visible token."""
    completion, reasoning = output_tokens(plan.usage)
    times = plan.token_times()
    end, first = plan.end_at, plan.first_token_at
    if cut is None or cut >= end:
        return Sent(completion, reasoning, first, end, times)
    kept = [t[:bisect_right(t, cut)] for t in times]
    kept = [t for t in kept if len(t)]
    planned, due = sum(len(t) for t in times), sum(len(t) for t in kept)
    span = end - first
    if planned:
        visible = due if planned == completion else round(completion * due / planned)
        begin = min(t[0] for t in times)
        thought = 1.0 if cut >= begin else max(0.0, cut - first) / (begin - first) if begin > first else 0.0
    else:
        visible = round(completion * min(1.0, max(0.0, cut - first) / span)) if span > 0 else 0
        thought = min(1.0, max(0.0, cut - first) / span) if span > 0 else 0.0
    return Sent(visible, round(reasoning * thought), first if cut >= first else None, max(cut, 0.0), kept)


class Stats:
    """The counters of one process. With `enabled=False` only exchanges are annotated."""

    def __init__(self, enabled: bool = True, share_dir: str | None = None):
        self.enabled = enabled
        self.share_dir = Path(share_dir) if share_dir and enabled else None
        self.lateness = Lateness() if enabled else None    # fed by the SSE pacer
        self.started = time.time()
        self.requests = self.streaming = self.active = self.active_streams = 0
        self.ws_connections = self.ws_active = self.ws_turns = 0
        self.status = [0] * 6                                # responses by status // 100
        self.endpoints: dict[str, list[int]] = {}           # name -> [requests, streaming, errors]
        self.errors: dict[str, int] = {}
        self.injected: dict[str, int] = {}
        self.webhooks: dict[str, int] = {}                  # deliveries by outcome (webhook())
        self.models: dict[str, ModelStats] = {}
        self.http = Histogram()
        self.ring = Ring()
        self.writers: tuple = ()        # trace file / access log, set by the observer
        self._sharing = False
        self._stop_sharing = lambda: None
        self.serving_state = None       # the serving model's per-model state, a callable (llmsim.state.serving)

    # -- fed by the observer -------------------------------------------------------------
    def serving(self) -> None:
        """The server started (lifespan): under --workers, start sharing snapshots."""
        if self.share_dir is not None and not self._sharing:
            self._start_sharing()

    def request_started(self) -> None:
        self.active += 1
        if self.share_dir is not None and not self._sharing:
            self._start_sharing()

    def request_finished(self, ex: Exchange, seconds: float) -> None:
        """The hottest call: written out flat (no helper calls on the success path)."""
        self.active -= 1
        self.requests += 1
        http = self.http
        i = bisect_left(BOUNDS, seconds)
        http.counts[i] += 1
        http.sums[i] += seconds
        if seconds > http.max:
            http.max = seconds
        status = ex.status
        self.status[status // 100] += 1
        counts = self.endpoints.get(ex.endpoint)
        if counts is None:
            counts = self.endpoints[ex.endpoint] = [0, 0, 0]
        counts[0] += 1
        failed = 0
        if ex.error is not None or status >= 400 or not status:
            if ex.error is None:
                self._count_error(f"http_{status}" if status else "no_response", False)
            counts[2] += 1
            failed = 1
        tokens = 0
        m = ex.model
        if m is not None:
            m.running -= 1
            if ex.stream:
                self.active_streams -= 1
                counts[1] += 1
                self.streaming += 1
                tokens = self._stream_ended(m, ex)
            else:
                usage = ex.plan.usage
                tokens = usage.total_tokens - usage.input_tokens
        ring = self.ring
        second = int(ex.wall + seconds)
        j = second % RING
        if ring.stamps[j] != second:
            ring.clear(j, second)
        ring.requests[j] += 1
        ring.tokens[j] += tokens
        if failed:
            ring.errors[j] += 1

    def _stream_ended(self, m: ModelStats, ex: Exchange) -> int:
        """A stream's output, counted when it ends (`record` counted its request and prompt):
        what it sent (`sent`), so a stream its client left counts only that. Its tokens."""
        plan, delay, cut = ex.plan, ex.delay, ex.cut
        if cut is None:                 # all of it sent (most streams): counted as `record` does
            usage = plan.usage
            reasoning = usage.reasoning_tokens
            tokens = usage.total_tokens - usage.input_tokens
            m.completion += tokens - reasoning
            m.reasoning += reasoning
            end = plan.end_at
            if not end:
                m.instant += 1
            else:
                m.ttft.observe(plan.first_token_at + delay)
                m.e2e.observe(end + delay)
                for times in plan.token_times():
                    m.itl.observe_gaps(times)
            return tokens
        out = sent(plan, cut)
        m.completion += out.completion
        m.reasoning += out.reasoning
        if not plan.end_at:
            m.instant += 1
        else:
            if out.first is not None:
                m.ttft.observe(out.first + delay)
            m.e2e.observe(out.end + delay)
            for times in out.times:
                m.itl.observe_gaps(times)
        return out.completion + out.reasoning

    def ws_opened(self) -> None:
        self.ws_connections += 1
        self.ws_active += 1
        if self.share_dir is not None and not self._sharing:
            self._start_sharing()

    def ws_closed(self) -> None:
        self.ws_active -= 1

    # -- fed by the code that knows the plan ----------------------------------------------
    def record(self, plan, endpoint: str, stream: bool = False, delay: float = 0.0) -> None:
        """A planned answer: tokens, simulated TTFT, gaps and duration, per model; `delay`:
        seconds before its clock started (the serving model's wait and prefill), in its TTFT."""
        ex = CURRENT.get()
        http = ex is not None and ex.plan is None and ex.kind != WEBSOCKET     # the request's first plan
        if http:
            ex.plan, ex.endpoint, ex.stream = plan, endpoint, stream
            if delay:
                ex.delay = delay
        if not self.enabled:
            return
        m = self.models.get(plan.model)
        if m is None:
            name = plan.model if len(self.models) < MAX_MODELS else OTHER_MODEL
            m = self.models.get(name) or self.models.setdefault(name, ModelStats())
        usage = plan.usage
        prompt, reasoning = usage.input_tokens, usage.reasoning_tokens
        completion = usage.total_tokens - prompt - reasoning
        m.requests += 1
        m.prompt += prompt
        if http and stream:             # its output is counted when it ends (`_stream_ended`)
            ex.model = m
            m.running += 1
            self.active_streams += 1
            return
        m.completion += completion
        m.reasoning += reasoning
        end = plan.end_at
        if not end:                     # no simulated time at all: no gaps to report either
            m.instant += 1
        else:
            m.ttft.observe(plan.first_token_at + delay)
            m.e2e.observe(end + delay)
            for times in plan.token_times():         # (llmsim.sim.plans.Plan)
                m.itl.observe_gaps(times)
        if http:
            ex.model = m
            m.running += 1
            if stream:
                self.active_streams += 1
        else:                                   # a WebSocket turn (or planned outside a request)
            self.ws_turns += ex is not None and ex.kind == WEBSOCKET
            self.ring.add(int(time.time()), 0, completion + reasoning, 0)

    @contextlib.contextmanager
    def turn(self, plan, began: float | None = None, delay: float = 0.0):
        """One WebSocket turn around its sending: counted like `record`, and with a trace
        file or access log, one line (id `<connection id>:<n>`) when the turn has been sent,
        starting at `began` (`time.perf_counter()` when the turn's clock started; default now)."""
        self.record(plan, WEBSOCKET, True, delay)
        ex = CURRENT.get()
        if not self.writers or ex is None:
            yield
            return
        ex.turns += 1
        line = Exchange(f"{ex.id}:{ex.turns}", WEBSOCKET, "WS", ex.path, WEBSOCKET, self)
        line.plan, line.stream, line.status, line.delay = plan, True, 101, delay
        if began is not None:           # the turn began before it was planned
            line.wall -= line.start - began
            line.start = began
        try:
            yield
        finally:
            end = line.wall + (time.perf_counter() - line.start)
            for writer in self.writers:
                writer.write(line, end)

    def error(self, kind: str, *, injected: bool = False) -> None:
        """An error answer of `kind` (an error code); `injected` for simulated faults."""
        ex = CURRENT.get()
        if ex is not None and ex.kind != WEBSOCKET:
            if ex.error is not None:
                return                          # already counted for this request
            ex.error, ex.injected = kind, injected
        if self.enabled:
            self._count_error(kind, injected)
            if ex is None or ex.kind == WEBSOCKET:
                self.ring.add(int(time.time()), 0, 0, 1)

    def webhook(self, outcome: str) -> None:
        """A webhook delivery's step (llmsim.state.webhooks): `queued` (one event for one URL),
        `sent` (an attempt), `failed` (an attempt without a 2xx), `delivered`, `dropped`."""
        if self.enabled:
            self.webhooks[outcome] = self.webhooks.get(outcome, 0) + 1

    def _count_error(self, kind: str, injected: bool) -> None:
        table = self.injected if injected else self.errors
        table[kind] = table.get(kind, 0) + 1

    # -- read side -----------------------------------------------------------------------
    def snapshot(self) -> dict:
        """This process's state as plain data (what `statsview.merge` combines)."""
        return {
            "pid": os.getpid(), "started": self.started, "enabled": self.enabled,
            "requests": self.requests, "streaming": self.streaming, "active": self.active,
            "active_streams": self.active_streams, "ws_connections": self.ws_connections,
            "ws_active": self.ws_active, "ws_turns": self.ws_turns, "status": {f"{i}xx" if i else "none": n for i, n in enumerate(self.status) if n},
            "endpoints": {k: list(v) for k, v in self.endpoints.items()},
            "errors": dict(self.errors), "injected": dict(self.injected), "webhooks": dict(self.webhooks),
            "models": {k: m.snapshot() for k, m in self.models.items()},
            "http": self.http.snapshot(),
            "lateness": (self.lateness or Histogram()).snapshot(),
            "ring": self.ring.snapshot(),
            "serving": self.serving_state() if self.serving_state is not None else {},
        }

    def _start_sharing(self) -> None:
        self._sharing = True
        try:        # `llmsim serve` made its parent; a parent gone means the server is stopping
            self.share_dir.mkdir(exist_ok=True)     # (made again here, it would outlive it)
        except FileNotFoundError:
            return
        loop = asyncio.get_running_loop()
        writer = ThreadPoolExecutor(1, thread_name_prefix="llmsim-stats")
        writing: Future | None = None
        timer: asyncio.TimerHandle | None = None

        def tick():
            nonlocal writing, timer
            if writing is None or writing.done():   # a slow write is skipped, not queued
                writing = writer.submit(write_snapshot, self.share_path(), orjson.dumps(self.snapshot()))
            timer = loop.call_later(SHARE_INTERVAL, tick)

        def stop():
            timer.cancel()
            writer.shutdown(wait=False)
        self._stop_sharing = stop
        tick()

    def stopped(self) -> None:
        """The server stopped: no more snapshot files."""
        self._stop_sharing()
        self._stop_sharing = lambda: None

    def share_path(self) -> Path:
        """Where this worker's snapshot is shared."""
        return self.share_dir / f"{os.getpid()}.json"


def write_snapshot(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically (a rename), off the event loop."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
