"""One timer for every paced stream of an app on an event loop (an app's `Pacers`, held by its
`Drain`: never shared with another app in the process).

Each stream is a small state machine in one wheel of millisecond slots: when the loop's
single timer fires, every stream due writes its due events from the timer callback itself,
and the request's task only waits for its stream to end. Each request also lets due streams
write as it starts and ends (`catch_up`, from llmsim.observe.observer). Invariant: a write the
transport cannot take at once (flow control) is finished in a task, and its stream waits for
it before its next write. The story: docs/internals.md#pacingpacer.
"""
from __future__ import annotations

import asyncio
import contextvars
import heapq
import time
from itertools import islice
from typing import Any, Awaitable, Callable, Iterator

from llmsim.errors import ConnectionDrop

SLOT = 0.0001           # the finest slot of a Pacer (seconds): a clock finer than uvloop's
MAX_BATCH = 256         # events written at most per step: what a stream owes after its client
                        # stopped reading goes out in writes this size, each waiting for the client
INFINITE = 2**63


def send_now(send: Callable[[dict], Awaitable[None]], message: dict) -> Awaitable[None] | None:
    """Run `send(message)`; None when it completed without waiting (the usual case), else
    an awaitable that completes it."""
    coro = send(message)
    try:
        waiting = coro.send(None)
    except StopIteration:
        return None
    return _Rest(coro, waiting)


class _Rest:
    """The rest of a started coroutine that waits on `waiting` (what it last yielded)."""

    def __init__(self, coro, waiting):
        self.coro, self.waiting = coro, waiting

    def __await__(self):
        coro, waiting = self.coro, self.waiting
        while True:
            try:
                yield waiting
            except BaseException as exc:        # e.g. cancelled while waiting: the coroutine's
                try:
                    waiting = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                waiting = coro.send(None)
            except StopIteration as stop:
                return stop.value


class PacedStream:
    """One stream: its items as (due time, item) pairs (an SSE frame, an event), when it
    began, how it writes; `done` resolves when it ends."""
    __slots__ = ("timed", "start", "write", "keepalive", "lateness", "clock", "context", "done",
                 "pending", "stepped", "first_wait", "keepalive_at", "closed", "due", "stopped", "pacer")

    def __init__(self, timed: Iterator, start: float, write: Callable[[list], Awaitable | None],
                 keepalive: float | None, lateness, clock):
        self.timed = timed                  # (due time, item) pairs
        self.start = start
        self.write = write                  # a batch (list of items; [] = keep-alive) -> None or a wait
        self.keepalive = keepalive          # seconds between comment lines during the first wait
        self.lateness = lateness            # a stats.Lateness: how late each batch left
        self.clock = clock                  # llmsim.clock: how late a batch left is read on it
        self.context = contextvars.copy_context()
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.pending: Any = None            # the next (due time, item), not yet due
        self.stepped = False                # step() ran before
        self.first_wait = True              # no event has yet been written after waiting for it
        self.keepalive_at: float | None = None
        self.closed = False
        self.due = 0.0                      # when it next writes, while in a Pacer's slot
        self.stopped = False                # ended early by a shutdown (`end`)
        self.pacer: Pacer | None = None     # the app's pacer it runs on (`Pacer.add`); None: in a task

    def close(self) -> None:
        """Stop (the client left, or the response ended): nothing more is written."""
        if not self.closed:
            self.closed = True
            close = getattr(self.timed, "close", None)
            if close is not None:
                close()

    def end(self, now: float) -> float | None:
        """The server is shutting down (llmsim.pacing.draining): write what is left of the
        stream now, which its frames, once they hear of the shutdown, make the next event
        (already rendered) and the API's terminal error; then finish. Returns None (a
        stream whose write waits for the client finishes once it is written)."""
        if self.closed or self.done.done():
            return None
        self.stopped, self.keepalive_at = True, None
        batch = [] if self.pending is None else [self.pending[1]]
        self.pending = None
        try:
            batch += [item for _, item in self.timed]
        except ConnectionDrop as drop:
            return self._finish(drop)
        except BaseException as exc:
            return self._finish(exc)
        wait = self.write(batch) if batch else None
        if wait is not None:
            return self._after(wait, None, None)
        return self._finish(None)

    def step(self, now: float) -> float | None:
        """Write what is due at `now`; the time of the next write, or None when finished."""
        batch: list = []
        batch_due = due = None
        ending: BaseException | None = None         # the stream ends (None: the items ran out)
        start, timed, pair = self.start, self.timed, self.pending
        try:
            if pair is not None:                    # the pair found not yet due last time
                due = start + pair[0]
                if due <= now:
                    batch_due = due
                    batch.append(pair[1])
                    pair = self.pending = None
            if pair is None:
                add = batch.append
                # a `for` over the items, not next() per item (the loop runs once per event);
                # islice caps the batch (docs/performance.md, "What is kept for speed")
                for pair in islice(timed, MAX_BATCH - len(batch)):
                    due = start + pair[0]
                    if due > now:
                        self.pending = pair
                        break
                    if batch_due is None:
                        batch_due = due
                    add(pair[1])
                else:
                    if len(batch) < MAX_BATCH:      # the items ran out
                        due = None
                    else:   # far behind (its client stopped reading): the rest in later writes, as it reads
                        pair = self.pending = next(timed)
                        due = start + pair[0]
        except StopIteration:
            self.pending = due = None
        except ConnectionDrop as drop:      # a drop still sends what was due before it
            self.pending, due, ending = None, None, drop
        except BaseException as exc:
            return self._finish(exc)
        wait = None
        if batch:
            self.first_wait = self.first_wait and not self.stepped
            wait = self.write(batch)
            lateness = self.lateness
            if lateness is not None:            # once written; on the stream's clock (precise)
                late = self.clock.now() - batch_due
                pending = lateness.pending      # (stats.Lateness.add, without its call)
                pending.append(late if late > 0.0 else 0.0)
                if len(pending) >= lateness.BATCH:
                    lateness.count_pending()
        elif self.keepalive_at is not None and now >= self.keepalive_at:
            wait = self.write([])               # a comment line while waiting for the first token
        self.stepped, self.keepalive_at = True, None
        following = due
        if self.keepalive and self.first_wait and due is not None and due - now > self.keepalive:
            following = self.keepalive_at = now + self.keepalive
        if wait is not None:
            return self._after(wait, following, ending)
        if following is None:
            return self._finish(ending)
        return following

    def _after(self, wait: Awaitable, following: float | None, ending: BaseException | None) -> None:
        """A write waits for the client: finish it in a task, then carry on (or end)."""
        async def resume():
            try:
                await wait
            except BaseException as exc:
                self._finish(exc)
                return
            if following is None:
                self._finish(ending)
            elif not self.closed:
                pacer = self.pacer
                if pacer.ended:                 # the server shut down meanwhile
                    self.end(pacer.loop.time())
                else:
                    pacer.add(self, following)
        asyncio.get_running_loop().create_task(resume(), context=self.context)
        return None

    def _finish(self, error) -> None:
        if not self.done.done():
            if error is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)
        return None


class Pacer:
    """The streams of one event loop, in slots by when they next write; one timer.

    A slot holds the streams due within one step of the loop's clock (a millisecond under
    uvloop), first added first; the slots' steps are kept in a heap of ints. Adding a stream
    costs a dict look-up and an append, where a heap of (due time, order, stream) entries
    cost a tuple and a dozen tuple comparisons. The timer is armed for the end of the
    earliest slot, when all of it is due; nothing is written before it is due."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        # uvloop's time and timers are whole milliseconds: a timer for 0.4 ms ahead fires at
        # once and finds nothing due. The timer is therefore never armed less than one step
        # of the clock ahead (no spinning).
        self.resolution = clock_resolution(loop)
        self.per_second = 1.0 / max(self.resolution, SLOT)     # slots per second
        self.slots: dict[int, list[PacedStream]] = {}
        self.ticks: list[int] = []          # heap: the slots' numbers
        self.timer: asyncio.TimerHandle | None = None
        self.timer_tick = INFINITE          # the slot the timer is armed for the end of
        self.ended = False                  # the server is shutting down: streams end as they come (`end_all`)

    def end_all(self) -> None:
        """The server is shutting down: every stream waiting here ends now, with what is left
        of it (`PacedStream.end`), as does any added later."""
        self.ended = True
        now = self.loop.time()
        slots, self.slots, self.ticks = self.slots, {}, []
        if self.timer is not None:
            self.timer.cancel()
            self.timer, self.timer_tick = None, INFINITE
        for tick in sorted(slots):
            for stream in slots[tick]:
                if not stream.closed:
                    stream.context.run(stream.end, now)

    def add(self, stream: PacedStream, at: float) -> None:
        stream.pacer = self
        if self.ended:
            stream.context.run(stream.end, self.loop.time())
            return
        stream.due = at
        tick = int(at * self.per_second)
        slot = self.slots.get(tick)
        if slot is not None:
            slot.append(stream)
            return
        self.slots[tick] = [stream]
        heapq.heappush(self.ticks, tick)
        if tick < self.timer_tick:
            self._arm(tick, (tick + 1) / self.per_second)

    def _arm(self, tick: int, at: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer_tick = tick
        self.timer = self.loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self.timer, self.timer_tick = None, INFINITE
        now = self.loop.time()      # the timers' own clock: never ahead of Clock.now (no early write)
        self._write_due(now)
        if self.ticks:
            tick = self.ticks[0]
            self._arm(tick, max((tick + 1) / self.per_second, now + self.resolution))

    def catch_up(self, now: float) -> None:
        """Write what fell due by `now` (the loop's time) while the loop runs other work. The
        timer fires between loop steps, and one step may run a burst of requests (a thousand
        streams arriving or ending): called between them, every stream's
        due events leave within one request's work rather than after the whole step. Only
        slots that ended before `now` are looked at (the current one is the timer's); the
        timer stays armed, and when it fires early it finds nothing due and waits again."""
        ticks = self.ticks
        if ticks and ticks[0] < int(now * self.per_second):
            self._write_due(now)

    def _write_due(self, now: float) -> None:
        """Step every stream due by `now`: whole slots that ended before it, and in the slot
        `now` is in, the streams due by then (the others wait there)."""
        slots, ticks, per_second = self.slots, self.ticks, self.per_second
        current = int(now * per_second)
        waiting: list[PacedStream] = []
        while ticks and ticks[0] <= current:
            tick = heapq.heappop(ticks)
            partly = tick == current
            for stream in slots.pop(tick):
                if stream.closed:
                    continue
                if partly and stream.due > now:
                    waiting.append(stream)
                    continue
                following = stream.context.run(stream.step, now)
                if following is not None:       # (a stream whose write waits adds itself later)
                    # `add` written in place, without arming: _fire arms the timer once after
                    stream.due = following
                    step = int(following * per_second)
                    slot = slots.get(step)
                    if slot is not None:
                        slot.append(stream)
                    else:
                        slots[step] = [stream]
                        heapq.heappush(ticks, step)
        if waiting:
            slot = slots.get(current)
            if slot is None:
                slots[current] = waiting
                heapq.heappush(ticks, current)
            else:
                slot[:0] = waiting


def clock_resolution(loop: asyncio.AbstractEventLoop) -> float:
    """The step of `loop.time()`: 1 ms for uvloop (libuv's clock), the monotonic clock's else."""
    try:
        import uvloop
    except ImportError:
        uvloop = None
    if uvloop is not None and isinstance(loop, uvloop.Loop):
        return 0.001
    return time.get_clock_info("monotonic").resolution


class Pacers:
    """An app's pacers: the pacer of each event loop it runs on (one, when served; an app
    driven by tests may see several). Held by the app's `Drain` (llmsim.pacing.draining), so
    two apps in one process never share a timer, a stream or a shutdown."""

    def __init__(self):
        self.by_loop: dict = {}
        self.last: Pacer | None = None      # the one `get` returned last
        self.loop: asyncio.AbstractEventLoop | None = None     # the loop the app serves on, while it does

    def serving(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """The app starts serving (its lifespan) on `loop`: a shutdown before, on the same loop,
        no longer ends the streams it paces (`Pacer.ended`)."""
        self.loop = loop
        for pacer in self.by_loop.values():
            pacer.ended = False

    def stopped(self) -> None:
        self.loop = None

    def catch_up(self) -> None:
        """As each request starts and ends (llmsim.observe.observer): `Pacer.catch_up` of the running
        loop's pacer (the app's last pacer is that loop's when it serves).

        It reads the loop's clock even when no stream waits, because under uvloop reading it
        is what brings libuv's cached clock up to date. libuv reads the time as a loop step
        begins, and when the step ends it sleeps until its next timer counting from that
        reading: after a step that handled a long burst of requests, every timer would fire
        that much late, the first tokens of a thousand paced streams with it (bench/RESULTS.md,
        "uvloop's cached clock").

        The loop is the one the app serves on (asking asyncio for the running loop costs a
        getpid system call in CPython 3.11: two a request); else, without a lifespan, the running one."""
        loop = self.loop or asyncio.get_running_loop()
        now = loop.time()
        pacer = self.last
        if pacer is not None and pacer.ticks and pacer.loop is loop:
            pacer.catch_up(now)

    def end_all(self) -> None:
        """The server is shutting down: the running loop's streams end (`Pacer.end_all`)."""
        self.get().end_all()

    def get(self) -> Pacer:
        loop = asyncio.get_running_loop()
        pacer = self.by_loop.get(loop)
        if pacer is None:
            self.by_loop = {other: p for other, p in self.by_loop.items() if not other.is_closed()}
            pacer = self.by_loop[loop] = Pacer(loop)
        self.last = pacer
        return pacer

