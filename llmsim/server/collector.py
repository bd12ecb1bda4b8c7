"""When CPython's cyclic garbage collector may pause a serving process.

Start-up objects are frozen; requests leave no cyclic garbage, so young collections wait for
`YOUNG` allocations, and middle and full collections never start on their own: a full one
runs when the process goes quiet (at most once per `quiet_gap`; under constant load once per
`max_wait`). Installed from above (llmsim.api.front gives it to the observer) on the tuned
server only. The story and figures: docs/internals.md#servercollector, bench/RESULTS.md.
"""
from __future__ import annotations

import gc
from typing import Callable

NEVER = 2**31 - 1       # a threshold never reached: that generation waits for a full pass
YOUNG = 10_000          # container objects allocated (net) between young collections


class Collector:
    """The full-collection policy of one process; `gc_module` and `schedule` are injectable."""

    def __init__(self, quiet_gap: float = 1.0, max_wait: float = 60.0, gc_module=gc,
                 schedule: Callable[[Callable[[], object]], object] | None = None):
        self.quiet_gap, self.max_wait = quiet_gap, max_wait
        self.gc = gc_module
        self.schedule = schedule          # runs the collection after the current callback
        self.last_full = float("-inf")
        self.pending = False
        self._thresholds: tuple[int, int, int] | None = None
        # `request_ended` does nothing before this (the observer skips the call): serving, no
        # collection pending, `quiet_gap` after the last full one
        self.due = float("inf")

    def serving(self, now: float) -> None:
        """Start-up is over: collect and freeze what it left; young collections every `YOUNG`
        objects, and no other collection starts on its own."""
        self.gc.collect()
        self.gc.freeze()
        self._thresholds = self.gc.get_threshold()
        self.gc.set_threshold(YOUNG, NEVER, NEVER)
        self.last_full = now
        self.due = now + self.quiet_gap

    def stopped(self) -> None:
        """The app stopped (tests run many in one process): CPython's policy again."""
        if self._thresholds is not None:
            self.gc.set_threshold(*self._thresholds)
            self.gc.unfreeze()
            self._thresholds = None
            self.due = float("inf")

    def request_ended(self, now: float, in_flight: int) -> None:
        """Called as each request ends (`now` on a monotonic clock, in seconds). Before
        `serving` (an app driven without its lifespan, as in tests) and after `stopped`,
        CPython's own policy collects, and this adds nothing. Before `due` it would do nothing:
        the observer skips the call."""
        waited = now - self.last_full
        if self._thresholds is None or self.pending or waited < self.quiet_gap:
            return
        if waited >= self.max_wait or (in_flight == 0 and self._collected_since_full()):
            self.last_full, self.pending, self.due = now, True, float("inf")
            if self.schedule is None:
                self._collect()
            else:
                self.schedule(self._collect)

    def _collected_since_full(self) -> bool:
        """A collection ran since the last full one (`get_count()`: young collections since
        the last middle one, middle ones since the last full one)."""
        _, young_runs, middle_runs = self.gc.get_count()
        return bool(young_runs or middle_runs)

    def _collect(self) -> None:
        self.pending = False
        if self._thresholds is not None:
            self.due = self.last_full + self.quiet_gap
        self.gc.collect()
