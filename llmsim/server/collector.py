"""When CPython's cyclic garbage collector may pause a serving process.

Start-up (modules, spec, schemas, templates: tens of thousands of objects) lives as long as
the process, so it is frozen: no collection walks it again.

Requests leave no cyclic garbage (refcounting frees it all), yet CPython's default policy
walks them:
- a young collection each time 700 more container objects are alive than at the last one.
  One Responses request holds hundreds at once, so under load young collections run every
  few milliseconds and take a noticeable share of the CPU. Here a young collection waits for
  `YOUNG` (10,000) and is rare and short;
- a middle collection every 10 young ones, walking every survivor: with many streams open, a
  pause in which no stream of the process writes. None starts on its own here;
- a full collection when survivors grow by a quarter: a longer pause still. None starts on
  its own here either.

What young collections leave waits for a full collection, which runs when the process
goes quiet (its last request in flight ended, and a young collection ran since the last
one), at most once per `quiet_gap`; under load that never goes quiet, once per `max_wait`.
What each collection cost when measured (`gc.callbacks`, W2/W4/W5 of bench/perf.py) is in
bench/RESULTS.md ("Figures behind docs/performance.md").
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

    def serving(self, now: float) -> None:
        """Start-up is over: collect and freeze what it left; young collections every `YOUNG`
        objects, and no other collection starts on its own."""
        self.gc.collect()
        self.gc.freeze()
        self._thresholds = self.gc.get_threshold()
        self.gc.set_threshold(YOUNG, NEVER, NEVER)
        self.last_full = now

    def stopped(self) -> None:
        """The app stopped (tests run many in one process): CPython's policy again."""
        if self._thresholds is not None:
            self.gc.set_threshold(*self._thresholds)
            self.gc.unfreeze()
            self._thresholds = None

    def request_ended(self, now: float, in_flight: int) -> None:
        """Called as each request ends (`now` on a monotonic clock, in seconds). Before
        `serving` (an app driven without its lifespan, as in tests) and after `stopped`,
        CPython's own policy collects, and this adds nothing."""
        waited = now - self.last_full
        if self._thresholds is None or self.pending or waited < self.quiet_gap:
            return
        if waited >= self.max_wait or (in_flight == 0 and self._collected_since_full()):
            self.last_full, self.pending = now, True
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
        self.gc.collect()
