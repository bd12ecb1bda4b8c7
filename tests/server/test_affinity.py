"""`--workers` filling the CPUs: each worker pinned to a CPU of its own (llmsim.server.affinity)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import LiveServer
from llmsim.server import affinity

pytestmark = [pytest.mark.live, pytest.mark.skipif(not affinity.supported(), reason="Linux CPU affinity only")]
SETTLE_S = 120          # generous: on a busy machine a worker takes a while to start


@pytest.fixture
def server_id():
    """A server id no live server has (claims are per server); this process's claims are
    given back afterwards."""
    yield 4_000_000_000 + os.getpid()
    while affinity._held:
        affinity._held.pop().close()


@pytest.mark.parametrize("workers, enabled, cpus, pinned", [
    (2, True, 2, True), (8, True, 8, True),           # the workers fill the CPUs
    (2, True, 8, False),                               # room to spare: the scheduler places them
    (4, True, 2, False),                               # more workers than CPUs
    (1, True, 1, False),                               # one process
    (2, False, 2, False),                              # --no-pin-workers
])
def test_workers_are_pinned_only_when_they_fill_the_cpus(workers, enabled, cpus, pinned):
    assert affinity.should_pin(workers, enabled, cpus) is pinned


def test_each_worker_claims_the_next_free_cpu(server_id):
    pinned = []
    pin = lambda pid, cpus: pinned.append(cpus)
    assert [affinity.claim_cpu([3, 5], server_id, pin) for _ in range(2)] == [3, 5]
    assert pinned == [{3}, {5}]


def test_nothing_is_pinned_when_every_cpu_is_claimed(server_id):
    pinned = []
    pin = lambda pid, cpus: pinned.append(cpus)
    affinity.claim_cpu([3], server_id, pin)
    assert affinity.claim_cpu([3], server_id, pin) is None
    assert pinned == [{3}]


def test_another_server_claims_its_own_cpus(server_id):
    pin = lambda pid, cpus: None
    assert affinity.claim_cpu([3], server_id, pin) == 3
    assert affinity.claim_cpu([3], server_id + 1, pin) == 3


def test_where_pinning_is_refused_the_worker_runs_unpinned_and_frees_its_claim(server_id):
    def refuse(pid, cpus):
        raise PermissionError("sched_setaffinity: operation not permitted")
    assert affinity.claim_cpu([3], server_id, refuse) is None
    assert affinity.claim_cpu([3], server_id, lambda pid, cpus: None) == 3


def test_a_dead_workers_cpu_is_claimed_again(server_id):
    code = (f"from llmsim.server import affinity; "
            f"assert affinity.claim_cpu([3], {server_id}, lambda pid, cpus: None) == 3")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    assert affinity.claim_cpu([3], server_id, lambda pid, cpus: None) == 3


def worker_cpus(server: LiveServer, workers: int) -> list[str]:
    """The CPUs each worker process's main thread may run on (/proc's list form, e.g. "0-1"),
    once every worker has started (and so made its choice): all share their stats."""
    deadline = time.monotonic() + SETTLE_S
    while httpx.get(f"{server.url}/llmsim/stats", timeout=SETTLE_S).json()["workers"] < workers:
        assert time.monotonic() < deadline, "the workers did not all start"
        time.sleep(0.1)
    return sorted(workers_by_pid(server).values())


def workers_by_pid(server: LiveServer) -> dict[int, str]:
    """Each live worker process of `server` and the CPUs its main thread may run on."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:                    # a process may end while it is read
            status = (entry / "status").read_text()
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            if (fields.get("PPid") == str(server.proc.pid) and fields.get("State", "")[:1] != "Z"
                    and "spawn_main" in (entry / "cmdline").read_text()):
                found[int(entry.name)] = fields["Cpus_allowed_list"].strip()
        except OSError:
            continue
    return found


CPUS = affinity.usable_cpus()
fills = pytest.mark.skipif(not 2 <= len(CPUS) <= 8, reason="needs 2-8 usable CPUs")


@fills
def test_workers_filling_the_cpus_each_run_on_a_cpu_of_their_own():
    server = LiveServer("--profile", "instant", "--workers", str(len(CPUS)))
    try:
        assert worker_cpus(server, len(CPUS)) == sorted(str(cpu) for cpu in CPUS)
    finally:
        server.stop()


@fills
def test_no_pin_workers_leaves_every_worker_on_every_cpu():
    server = LiveServer("--profile", "instant", "--workers", str(len(CPUS)), "--no-pin-workers")
    try:
        cpus = worker_cpus(server, len(CPUS))
        assert len(cpus) == len(CPUS) and len(set(cpus)) == 1 and cpus[0] not in map(str, CPUS)
    finally:
        server.stop()


@fills
def test_a_restarted_worker_takes_the_cpu_its_predecessor_held():
    server = LiveServer("--profile", "instant", "--workers", str(len(CPUS)))
    try:
        worker_cpus(server, len(CPUS))
        before = workers_by_pid(server)
        victim, cpu = sorted(before.items())[0]
        os.kill(victim, signal.SIGKILL)
        # uvicorn starts a new worker and it claims the CPU set free. On a busy machine uvicorn
        # may also replace a worker that answered its health check late: wait until every
        # worker is again on a CPU of its own (a new one starts on all CPUs, then pins itself).
        deadline = time.monotonic() + SETTLE_S
        while True:
            now = workers_by_pid(server)
            if victim not in now and sorted(now.values()) == sorted(str(c) for c in CPUS):
                break
            assert time.monotonic() < deadline, (before, now)
            time.sleep(0.2)
        assert [pid for pid, held in now.items() if held == cpu and pid not in before], (before, now)
    finally:
        server.stop()
