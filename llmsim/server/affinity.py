"""`--pin-workers` (the default): with as many `--workers` as CPUs, each worker on its own.

Paced streams fall due on the same ticks in every worker; pinned, none queues behind another
on one CPU (W5 of bench/perf.py is less late; bench/RESULTS.md). Each worker claims the first
CPU no other worker of its server holds with an abstract Unix socket (freed by the kernel
when the process dies). Nothing is pinned unless the workers fill the CPUs exactly, or where
Linux's affinity calls or abstract sockets are missing.
The story: docs/internals.md#serveraffinity.
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
