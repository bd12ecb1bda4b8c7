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

pytestmark = pytest.mark.skipif(not affinity.supported(), reason="Linux CPU affinity only")


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
    deadline = time.monotonic() + 30
    while httpx.get(f"{server.url}/llmsim/stats").json()["workers"] < workers:
        assert time.monotonic() < deadline, "the workers did not all start"
        time.sleep(0.1)
    return sorted(workers_by_pid(server).values())


def workers_by_pid(server: LiveServer) -> dict[int, str]:
    """Each live worker process of `server` and the CPUs its main thread may run on."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if (fields.get("PPid") == str(server.proc.pid) and fields.get("State", "")[:1] != "Z"
                and "spawn_main" in (entry / "cmdline").read_text()):
            found[int(entry.name)] = fields["Cpus_allowed_list"].strip()
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
        victim, cpu = sorted(workers_by_pid(server).items())[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:             # uvicorn starts a new worker; it claims the CPU set free
            now = workers_by_pid(server)
            if victim not in now and len(now) == len(CPUS) and cpu in now.values():
                break
            assert time.monotonic() < deadline, now
            time.sleep(0.2)
        assert sorted(now.values()) == sorted(str(c) for c in CPUS)
    finally:
        server.stop()
