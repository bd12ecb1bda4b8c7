"""Live counters behind /llmsim/stats and /metrics: cheap to feed, merged across workers.

Fed by llmsim.observe.observer (as an HTTP request ends, as a WebSocket connection opens
and closes), by the few places that know the plan (`record`, `error`) and by the SSE pacer
(`lateness`, once per written batch). State is plain ints and fixed-bucket histograms, and a
request adds only what it alone knows (a dozen increments, no allocation per token): totals
and the per-second history are worked out from those when read. `snapshot()` is that state
as plain data; under `--workers N` each worker writes its
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
from time import perf_counter
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


class Batched(Histogram):
    """A histogram fed at a high rate: the SSE pacer's lateness (once per written batch,
    50,000 times a second with a thousand paced streams) and each request's measured
    duration. A value is appended to `pending` (no bucket search, no call per value) and
    the pending values are counted together: sorted, then bucket by bucket (a search per
    bucket holding values, not per value), once `BATCH` have gathered (`add`; the request
    durations: as each wall second begins), or when read."""
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
        n, last, lo = len(pending), len(BOUNDS), 0
        while lo < n:
            i = bisect_left(bounds, pending[lo])         # the smallest value's bucket,
            hi = bisect_right(pending, bounds[i], lo) if i < last else n     # its values
            counts[i] += hi - lo
            sums[i] += sum(pending[lo:hi])
            lo = hi
        if pending[-1] > self.max:
            self.max = pending[-1]
        pending.clear()

    def observe(self, seconds: float, n: int = 1, _bounds=BOUNDS) -> None:
        self.count_pending()
        super().observe(seconds, n)

    def snapshot(self) -> dict:
        self.count_pending()
        return super().snapshot()


Lateness = Batched      # (the SSE pacer's)


class ModelStats:
    """One model's counters and simulated-timing histograms. Only what an answer adds is
    kept per answer; the rest is worked out when read (`snapshot`): `running` is the answers
    counted (`requests`) less those ended, `completion` the output less its reasoning, and
    answers with no simulated time at all (e.g. `--profile instant`), which have no e2e
    value (nor gaps to report), join the TTFT and duration histograms' zero bucket. So the
    benchmark case costs a few increments."""
    __slots__ = ("requests", "prompt", "output", "reasoning", "ended", "ttft", "itl", "e2e")

    def __init__(self):
        self.requests = self.prompt = self.output = self.reasoning = self.ended = 0
        self.ttft, self.itl, self.e2e = Histogram(), Histogram(), Histogram()

    def timed(self, plan, delay: float) -> None:
        """The simulated timing of `plan` (sent whole, with some simulated time)."""
        self.ttft.observe(plan.first_token_at + delay)
        self.e2e.observe(plan.end_at + delay)
        for times in plan.token_times():         # (llmsim.sim.plans.Plan)
            self.itl.observe_gaps(times)

    def snapshot(self) -> dict:
        hists = {"itl": self.itl.snapshot()}
        instant = self.ended - sum(self.e2e.counts)
        for name, hist in (("ttft", self.ttft), ("e2e", self.e2e)):
            snap = hist.snapshot()
            if instant:
                counts = dict((i, [i, c, total]) for i, c, total in snap["counts"])
                counts.setdefault(0, [0, 0, 0.0])[1] += instant
                snap["counts"] = sorted(counts.values())
            hists[name] = snap
        return {"requests": self.requests, "prompt": self.prompt, "completion": self.output - self.reasoning,
                "reasoning": self.reasoning, "running": self.requests - self.ended, **hists}


class Exchange:
    """One HTTP request or WebSocket connection, as the observer and the handlers see it.

    What most requests leave as it was is a class attribute (no store per request)."""
    kind = "http"                   # or WEBSOCKET
    status = 0                      # 0 until the response starts (or if it never does)
    endpoint = None                 # set by `Stats.record`, else by the observer as the exchange ends
    plan = error = model = None     # the first plan (`Stats.record`), an error code, its ModelStats
    stream = injected = False
    turns = 0                       # WebSocket turns traced so far
    token = None                    # resets llmsim.observe.stats.CURRENT when the exchange ends
    delay = 0.0                     # seconds before the plan's clock started (the serving model's wait and prefill)
    cut = None                      # a stream its client left: seconds into the plan when it did

    def __init__(self, request_id: str, method: str, path: str, request_headers: dict | None = None,
                 stats: "Stats | None" = None):
        self.id = request_id
        self.method = method
        self.path = path
        self.request_headers = request_headers      # {name: value} (bytes), as the front read them
        self.stats = stats
        self.start = perf_counter()
        self.wall = time.time()

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


# An endpoint's row (`Stats.rows`): answers by status // 100 (0: no response), then these
STREAMED, FAILED = 6, 7         # streamed answers; failed ones (an error, a status >= 400 or none)
ROW = 8


class Stats:
    """The counters of one process. With `enabled=False` only exchanges are annotated.

    A request adds what only it knows (its endpoint row's status class, its model's output,
    its duration); totals, the per-status table and the per-second history are worked out
    from those when read. The history: the totals as each wall second began (`base`, taken
    by the first event of a new second, `_next_second`), and each past second's difference."""

    def __init__(self, enabled: bool = True, share_dir: str | None = None):
        self.enabled = enabled
        self.share_dir = Path(share_dir) if share_dir and enabled else None
        self.lateness = Batched() if enabled else None     # fed by the SSE pacer
        self.started = time.time()
        self.active = 0                 # API requests in flight (the observer's count, kept even when off)
        self.active_streams = 0
        self.ws_connections = self.ws_active = self.ws_turns = 0
        self.rows: dict[str, list[int]] = {}                # endpoint name -> its row (ROW counts)
        self.errors: dict[str, int] = {}
        self.injected: dict[str, int] = {}
        self.webhooks: dict[str, int] = {}                  # deliveries by outcome (webhook())
        self.models: dict[str, ModelStats] = {}
        self.http = Batched()           # API requests' measured durations
        self.loose_errors = 0           # errors outside an HTTP request (WebSocket turns): the history's
        self.second = -1                # the wall second the history is in
        self.base = (0, 0, 0)           # (requests, output tokens, failed) as `second` began
        self.seconds: dict[int, tuple[int, int, int]] = {}  # earlier seconds': what each added
        self.writers: tuple = ()        # trace file / access log, set by the observer
        self._sharing = False
        self._stop_sharing = lambda: None
        self.serving_state = None       # the serving model's per-model state, a callable (llmsim.state.serving)

    # -- fed by the observer -------------------------------------------------------------
    def serving(self) -> None:
        """The server started (lifespan): under --workers, start sharing snapshots."""
        if self.share_dir is not None and not self._sharing:
            self._start_sharing()

    def request_finished(self, ex: Exchange, seconds: float) -> None:
        """The hottest call: written out flat (no helper calls on the success path)."""
        second = int(ex.wall + seconds)
        if second > self.second:
            self._next_second(second)
        self.http.pending.append(seconds)      # (Batched.add, counted in `_next_second`)
        status = ex.status
        row = self.rows.get(ex.endpoint) or self._row(ex.endpoint)
        row[status // 100] += 1
        if ex.error is not None or status >= 400 or not status:
            if ex.error is None:
                self._count_error(f"http_{status}" if status else "no_response", False)
            row[FAILED] += 1
        m = ex.model
        if m is None:
            return
        m.ended += 1
        plan = ex.plan
        if ex.stream:
            self.active_streams -= 1
            row[STREAMED] += 1
            if ex.cut is not None:      # its client left: what it sent
                self._cut(m, plan, ex.delay, ex.cut)
                return
        usage = plan.usage
        m.output += usage.total_tokens - usage.input_tokens
        m.reasoning += usage.reasoning_tokens
        if plan.end_at:
            m.timed(plan, ex.delay)

    def _row(self, endpoint: str) -> list[int]:
        row = self.rows[endpoint] = [0] * ROW
        return row

    @staticmethod
    def _cut(m: ModelStats, plan, delay: float, cut: float) -> None:
        """A stream its client left `cut` seconds into `plan`: what it sent (`sent`)."""
        out = sent(plan, cut)
        m.output += out.completion + out.reasoning
        m.reasoning += out.reasoning
        if plan.end_at:
            if out.first is not None:
                m.ttft.observe(out.first + delay)
            m.e2e.observe(out.end + delay)
            for times in out.times:
                m.itl.observe_gaps(times)

    def _totals(self) -> tuple[int, int, int]:
        """(requests ended, output tokens, failed requests and other errors) so far."""
        rows = self.rows.values()
        return (sum(sum(row[:STREAMED]) for row in rows), sum(m.output for m in self.models.values()),
                sum(row[FAILED] for row in rows) + self.loose_errors)

    def _next_second(self, second: int) -> None:
        """The first event of wall second `second`: the last one's history is closed."""
        totals = self._totals()
        added = tuple(now - then for now, then in zip(totals, self.base))
        if any(added):
            self.seconds[self.second] = added
        for old in [s for s in self.seconds if s <= second - RING]:
            del self.seconds[old]
        self.second, self.base = second, totals
        self.http.count_pending()
        if self.share_dir is not None and not self._sharing:      # (a server without a lifespan)
            self._start_sharing()

    def _now(self) -> None:
        """Close the last second's history if a new wall second has begun (events outside
        an HTTP request, which has its own clock)."""
        second = int(time.time())
        if second > self.second:
            self._next_second(second)

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
        seconds before its clock started (the serving model's wait and prefill), in its TTFT.
        A request's (first) answer is counted here and, what it sent, as it ends
        (`request_finished`); any other (a WebSocket turn, or planned outside a request) all here."""
        ex = CURRENT.get()
        if ex is None or ex.plan is not None or ex.kind == WEBSOCKET:
            if self.enabled:
                self._record_apart(plan, ex, delay)
            return
        ex.plan = plan
        ex.endpoint = endpoint
        ex.stream = stream
        if delay:
            ex.delay = delay
        if self.enabled:
            m = ex.model = self.models.get(plan.model) or self._model(plan.model)
            m.requests += 1
            m.prompt += plan.usage.input_tokens
            if stream:
                self.active_streams += 1

    def _model(self, name: str) -> ModelStats:
        if len(self.models) >= MAX_MODELS:
            name = OTHER_MODEL
        return self.models.get(name) or self.models.setdefault(name, ModelStats())

    def _record_apart(self, plan, ex: Exchange | None, delay: float) -> None:
        self._now()
        m = self.models.get(plan.model) or self._model(plan.model)
        usage = plan.usage
        m.requests += 1
        m.ended += 1
        m.prompt += usage.input_tokens
        m.output += usage.total_tokens - usage.input_tokens
        m.reasoning += usage.reasoning_tokens
        if plan.end_at:
            m.timed(plan, delay)
        if ex is not None and ex.kind == WEBSOCKET:
            self.ws_turns += 1

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
        line = Exchange(f"{ex.id}:{ex.turns}", "WS", ex.path, None, self)
        line.kind = line.endpoint = WEBSOCKET
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
            if ex is None or ex.kind == WEBSOCKET:      # (a request's: counted as it ends)
                self._now()
                self.loose_errors += 1

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
        rows = self.rows
        status = [sum(row[i] for row in rows.values()) for i in range(STREAMED)]
        history = {str(s): list(added) for s, added in self.seconds.items() if s > self.second - RING}
        if self.second >= 0:
            added = [now - then for now, then in zip(self._totals(), self.base)]
            if any(added):
                history[str(self.second)] = added
        return {
            "pid": os.getpid(), "started": self.started, "enabled": self.enabled,
            "requests": sum(status), "streaming": sum(row[STREAMED] for row in rows.values()),
            "active": self.active if self.enabled else 0,
            "active_streams": self.active_streams, "ws_connections": self.ws_connections,
            "ws_active": self.ws_active, "ws_turns": self.ws_turns,
            "status": {f"{i}xx" if i else "none": n for i, n in enumerate(status) if n},
            "endpoints": {k: [sum(row[:STREAMED]), row[STREAMED], row[FAILED]] for k, row in rows.items()},
            "errors": dict(self.errors), "injected": dict(self.injected), "webhooks": dict(self.webhooks),
            "models": {k: m.snapshot() for k, m in self.models.items()},
            "http": self.http.snapshot(),
            "lateness": (self.lateness or Histogram()).snapshot(),
            "ring": history,
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
