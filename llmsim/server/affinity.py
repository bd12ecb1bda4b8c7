"""`--pin-workers` (the default): with as many `--workers` as CPUs, each worker on its own.

A paced stream's events fall due on the same millisecond ticks as every other stream's, so
at each tick every worker wakes with a burst of writes, and so does a load generator on the
same machine. Left to the scheduler, two workers sometimes queue on one CPU for a whole
tick while a third process runs on the other, and every event of that tick leaves late.
Pinned, W5 of bench/perf.py (1,000 paced streams, two workers) is less late; the runs are in
bench/RESULTS.md ("Pinned workers").

Each worker claims the first CPU it may run on that no other worker of its server holds,
and pins its event loop's thread (and the threads it starts later) there. A claim is an
abstract Unix socket named after the server (the workers' parent process) and the CPU,
bound for the life of the worker: the kernel frees it when the process dies, so a
restarted worker finds its CPU free, and nothing is left on disk. Nothing is pinned unless
the workers fill the CPUs the server may use: with fewer workers (the scheduler has room,
and on a shared host the first CPUs may be someone else's busy ones), with more, with one,
or where Linux's affinity calls or abstract sockets are missing.
"""
from __future__ import annotations

import os
import socket
from typing import Callable, Iterable

CLAIM = "\0llmsim-{server}-cpu-{cpu}"      # abstract socket names (Linux): nothing on disk

_held: list[socket.socket] = []   # this process's claim, kept open while it lives


def supported() -> bool:
    return hasattr(os, "sched_setaffinity") and hasattr(socket, "AF_UNIX")


def usable_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if supported() else []


def should_pin(workers: int, enabled: bool, cpus: int) -> bool:
    """Whether `workers` processes are pinned, on a host where the server may use `cpus`."""
    return enabled and workers > 1 and workers == cpus


def claim_cpu(cpus: Iterable[int], server: int, pin: Callable[[int, set], None] | None = None) -> int | None:
    """Claim the first of `cpus` no other worker of `server` holds and pin the calling
    thread to it; the CPU, or None when every one is taken (then nothing is pinned)."""
    pin = pin or os.sched_setaffinity
    for cpu in cpus:
        try:
            claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError:              # no Unix sockets here (a sandbox): run unpinned
            return None
        try:
            claim.bind(CLAIM.format(server=server, cpu=cpu))
        except OSError:              # held by another worker (or abstract names unsupported)
            claim.close()
            continue
        try:
            pin(0, {cpu})
        except OSError:              # not allowed here (a sandbox): run unpinned
            claim.close()
            return None
        _held.append(claim)
        return cpu
    return None


def pin_worker(workers: int, enabled: bool) -> int | None:
    """In a `--workers` process at start-up: its CPU, when it is pinned to one."""
    cpus = usable_cpus()            # none where affinity is unsupported: nothing is pinned
    if not should_pin(workers, enabled, len(cpus)):
        return None
    return claim_cpu(cpus, os.getppid())
