"""Time, injected: the event loop's monotonic clock for pacing, the wall clock for timestamps.

Tests pass a `FakeClock` so timing behaviour is checked instantly and deterministically.
"""
from __future__ import annotations

import asyncio
import time

RETRY = 0.001      # the shortest second wait: one step of uvloop's clock (no spinning)


class Clock:
    realtime = True     # real time, the base of the loop's timers: streams may pace on them (llmsim.pacing.pacer)

    # Monotonic seconds: the base of the loop's timers (asyncio's and uvloop's clocks are
    # CLOCK_MONOTONIC), read precisely: uvloop's `loop.time()` is whole milliseconds as of the
    # start of the loop step, up to a millisecond behind. The C function itself, not a method
    # calling it: a paced stream reads it once per write.
    now = staticmethod(time.monotonic)
    wall = staticmethod(time.time)      # seconds since the epoch, for timestamps

    def request_start(self, received_at: float | None) -> float:
        """When a request's simulated time starts: when the server read it (`received_at`, on
        this clock), so time spent queued behind other requests counts toward its latency
        instead of being added to it; now, when the server did not say."""
        now = self.now()
        return now if received_at is None else min(received_at, now)

    async def sleep_until(self, deadline: float) -> None:
        """Return once the loop's clock has reached `deadline`, never before (uvloop's timers
        may fire up to a millisecond early; a second, shorter wait covers the rest)."""
        delay = deadline - self.now()
        while delay > 0:
            await asyncio.sleep(delay)
            remaining = deadline - self.now()
            if remaining <= 0:
                return
            delay = max(remaining, RETRY)


class FakeClock(Clock):
    """A clock that only moves when something sleeps on it."""
    realtime = False

    def __init__(self, start: float = 0.0, wall: float = 1_700_000_000.0):
        self.t = start
        self._wall = wall
        self.sleeps: list[float] = []

    def request_start(self, received_at: float | None) -> float:
        return self.now()      # a real-time stamp means nothing here

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return self._wall + self.t

    async def sleep_until(self, deadline: float) -> None:
        if deadline > self.t:
            self.sleeps.append(deadline - self.t)
            self.t = deadline
        await asyncio.sleep(0)
