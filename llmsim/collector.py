"""When CPython's cyclic garbage collector may pause a serving process.

Start-up (modules, spec, schemas, templates: ~70k objects) lives as long as the process,
so it is frozen: no collection walks it again.

Requests leave no cyclic garbage (refcounting frees it all: over W5 runs of 1,000 paced
streams no generation collected a single object), yet CPython starts a full collection each
time the objects that outlived two young collections grow by a quarter. Streams are such
objects, so with 1,000 of them open a full collection walks them all: 30-60 ms in which
no stream of the process writes (measured with `gc.callbacks`), several times a run.

So full collections never start on their own here. One runs when the process goes quiet
(its last request in flight ended, and young collections promoted something since the last
one), at most once per `quiet_gap`; under load that never goes quiet, once per `max_wait`.
Young collections stay automatic (pauses under 5 ms with 1,000 streams).
"""
from __future__ import annotations

import gc
from typing import Callable

NEVER = 2**31 - 1       # the third threshold: young collections between full ones


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
        """Start-up is over: collect and freeze what it left; no more automatic full collections."""
        self.gc.collect()
        self.gc.freeze()
        self._thresholds = self.gc.get_threshold()
        young, middle, _ = self._thresholds
        self.gc.set_threshold(young, middle, NEVER)
        self.last_full = now

    def stopped(self) -> None:
        """The app stopped (tests run many in one process): CPython's policy again."""
        if self._thresholds is not None:
            self.gc.set_threshold(*self._thresholds)
            self.gc.unfreeze()
            self._thresholds = None

    def request_ended(self, now: float, in_flight: int) -> None:
        """Called as each request ends (`now` on a monotonic clock, in seconds)."""
        waited = now - self.last_full
        if self.pending or waited < self.quiet_gap:
            return
        if waited >= self.max_wait or (in_flight == 0 and self.gc.get_count()[2]):
            self.last_full, self.pending = now, True
            if self.schedule is None:
                self._collect()
            else:
                self.schedule(self._collect)

    def _collect(self) -> None:
        self.pending = False
        self.gc.collect()
