"""CPU seconds and resident memory of a server process tree, read from /proc (Linux only).

A server may fork workers, so every figure covers the process and all its live descendants.
`Sampler` polls the tree's RSS in a background thread to catch the peak during a workload.
"""
from __future__ import annotations

import os
import threading
import time

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()   # fields after "pid (comm) "; [0] is state


def tree(pid: int) -> list[int]:
    """`pid` and every live descendant."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, ()))
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the tree (including reaped children's time)."""
    total = 0
    for p in tree(pid):
        fields = _stat_fields(p)
        if fields:   # utime stime cutime cstime are fields 14..17 of stat, [11..14] here
            total += sum(int(x) for x in fields[11:15])
    return total / TICKS


def rss_bytes(pid: int) -> int:
    """Resident set size of the tree, summed over its processes."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE
        except OSError:
            pass
    return total


class Sampler:
    """Poll `rss_bytes(pid)` every `interval` seconds until stopped; `.peak` is the maximum."""

    def __init__(self, pid: int, interval: float = 0.05):
        self.pid, self.interval = pid, interval
        self.peak = self.last = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.last = rss_bytes(self.pid)
            self.peak = max(self.peak, self.last)
            if self._stop.wait(self.interval):
                return


class Usage:
    """CPU seconds and peak RSS of a server tree over a `with` block."""

    def __init__(self, pid: int, interval: float = 0.05):
        self.pid, self.interval = pid, interval
        self.cpu_s = 0.0
        self.peak_rss = 0

    def __enter__(self) -> "Usage":
        self._cpu0 = cpu_seconds(self.pid)
        self._sampler = Sampler(self.pid, self.interval).__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._sampler.__exit__()
        self.cpu_s = cpu_seconds(self.pid) - self._cpu0
        self.peak_rss = self._sampler.peak

    @property
    def last_rss(self) -> int:
        return self._sampler.last


def wait_idle(pid: int, quiet_s: float = 0.5, timeout: float = 10.0) -> None:
    """Wait until the tree has used < 5% of a core for `quiet_s` (start-up or previous load over)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(quiet_s)
        if cpu_seconds(pid) - before < 0.05 * quiet_s:
            return
