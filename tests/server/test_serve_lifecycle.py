"""`llmsim serve` as a user runs it: a quiet start, a clean Ctrl-C, and nothing left behind
when it is stopped (its workers' scratch store on disk and stats in /dev/shm; one worker
keeps its store in memory)."""
from __future__ import annotations

import contextlib
import json
import signal
import time
from pathlib import Path

import httpx
import pytest

from conftest import LiveServer
from llmsim.settings import WORKER_ENV

pytestmark = pytest.mark.live

SHM = Path("/dev/shm")
SETTLE_S = 60                   # generous: on a loaded machine workers start and stop slowly


def interrupt(server: LiveServer) -> tuple[int, str]:
    """Ctrl-C, with a kept-alive connection open; the exit code and everything printed."""
    try:
        with httpx.Client(base_url=server.base, timeout=SETTLE_S) as client:
            reply = client.post("/chat/completions", json={
                "model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
            assert reply.status_code == 200
            server.proc.send_signal(signal.SIGINT)
            code = server.proc.wait(SETTLE_S)
    finally:
        server.stop()             # only if it is still running
    return code, server.output()


@pytest.mark.parametrize("workers,server", [("1", "tuned"), ("2", "tuned"), ("2", "plain")])
def test_ctrl_c_exits_zero_without_a_traceback(workers, server):
    code, output = interrupt(LiveServer("--profile", "instant", "--workers", workers, "--server", server))
    assert code == 0, output
    assert "Traceback" not in output


def test_start_up_prints_its_banner_then_only_uvicorn_info_lines():
    server = LiveServer("--profile", "instant")
    server.stop()
    lines = [line for line in server.output().splitlines() if line.strip()]
    banner, rest = lines[:4], lines[4:]
    assert banner[0].startswith("llmsim ") and [line.split(":")[0] for line in banner[1:]] == \
        ["  APIs", "  latency", "  store"], lines
    assert rest and all(line.startswith("INFO:") for line in rest), lines


def tmp_scratch(tmp: Path) -> list[str]:
    """The server's scratch directories under its own TMPDIR (a per-test directory)."""
    return sorted(p.name for p in tmp.glob("llmsim-*"))


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                status = (entry / "status").read_text()
                if f"\nPPid:\t{pid}\n" in status and "\nState:\tZ" not in status:
                    found.append(int(entry.name))
    return found


def worker_stats_dirs(pid: int) -> set[str]:
    """The stats scratch directories (llmsim-stats-*, in /dev/shm) that the workers of the server
    `pid` were handed (their settings, in their environment): this server's, not those of
    other servers running on the machine."""
    found = set()
    for child in children(pid):
        with contextlib.suppress(OSError):
            environ = (Path("/proc") / str(child) / "environ").read_bytes().split(b"\0")
            for var in environ:
                name, _, value = var.partition(b"=")
                if name == WORKER_ENV.encode():
                    stats_dir = json.loads(value)["stats_dir"]
                    found.add(Path(stats_dir).parent.name)
    return found


def in_tmpdir(tmp: Path, *args: str) -> LiveServer:
    return LiveServer("--profile", "instant", *args, env={"TMPDIR": str(tmp)})


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_server_removes_its_scratch_directories(tmp_path, how):
    server = in_tmpdir(tmp_path, "--workers", "2")
    try:
        deadline = time.monotonic() + SETTLE_S
        while not (stats := worker_stats_dirs(server.proc.pid)):     # workers are still starting
            assert time.monotonic() < deadline, "no worker of the server was handed a stats directory"
            time.sleep(0.1)
        assert [name for name in tmp_scratch(tmp_path) if name not in stats]    # its store's
        assert all(name.startswith("llmsim-stats-") and ((SHM / name).is_dir() or (tmp_path / name).is_dir())
                   for name in stats), stats       # in /dev/shm, or in its TMPDIR where there is none
        server.proc.send_signal(how)
        server.proc.wait(SETTLE_S)
    finally:
        server.stop()
    assert tmp_scratch(tmp_path) == []
    assert [name for name in stats if (SHM / name).exists()] == []


def shm_scratch() -> set[str]:
    return {p.name for p in SHM.glob("llmsim-stats-*")} if SHM.is_dir() else set()


def others(names: set[str], pid: int) -> set[str]:
    """Those of the scratch directories `names` in /dev/shm that are gone or are plainly
    another server's than the one of process `pid`: handed to a worker of another process,
    or holding a stats snapshot of a process other than `pid`."""
    theirs, ours = set(), {pid, *children(pid)}
    for name in names:
        snapshots = {p.stem for p in (SHM / name / "stats").glob("*.json")}
        if not (SHM / name).exists() or snapshots - {str(pid)}:
            theirs.add(name)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in ours:
            with contextlib.suppress(OSError):
                environ = (entry / "environ").read_bytes()
                theirs.update(name for name in names if f"/{name}/".encode() in environ)
    return theirs


def test_one_worker_keeps_its_store_in_memory_without_scratch_directories(tmp_path):
    shm_before = shm_scratch()
    server = in_tmpdir(tmp_path)
    try:
        client = server.client()
        created = client.responses.create(model="gpt-4o", input="Keep me.")
        assert client.responses.retrieve(created.id).output_text == created.output_text
        assert tmp_scratch(tmp_path) == []
        # Other servers on the machine come and go in /dev/shm meanwhile: wait until each new
        # directory is gone or shows whose it is (a worker of another server holds it, or a
        # snapshot of another process is in it). One this server made stays unexplained.
        deadline = time.monotonic() + SETTLE_S
        while unexplained := (new := shm_scratch() - shm_before) - others(new, server.proc.pid):
            assert not [name for name in new if (SHM / name / "stats" / f"{server.proc.pid}.json").exists()]
            assert time.monotonic() < deadline, unexplained
            time.sleep(0.2)
    finally:
        server.stop()
