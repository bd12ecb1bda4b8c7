"""`llmsim serve` as a user runs it: a quiet start, a clean Ctrl-C, and nothing left behind
when it is stopped (its workers' scratch store on disk and stats in /dev/shm; one worker
keeps its store in memory)."""
from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from conftest import LiveServer


def interrupt(server: LiveServer) -> tuple[int, str]:
    """Ctrl-C, with a kept-alive connection open; the exit code and everything printed."""
    try:
        with httpx.Client(base_url=server.base) as client:
            reply = client.post("/chat/completions", json={
                "model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
            assert reply.status_code == 200
            server.proc.send_signal(signal.SIGINT)
            code = server.proc.wait(15)
    finally:
        server.stop()             # only if it is still running
    return code, server.output()


@pytest.mark.parametrize("workers,server", [("1", "tuned"), ("2", "tuned"), ("2", "plain")])
def test_ctrl_c_exits_zero_without_a_traceback(workers, server):
    code, output = interrupt(LiveServer("--profile", "instant", "--workers", workers, "--server", server))
    assert code == 0, output
    assert "Traceback" not in output


def test_start_up_prints_only_uvicorn_info_lines():
    server = LiveServer("--profile", "instant")
    server.stop()
    lines = [line for line in server.output().splitlines() if line.strip()]
    assert lines and all(line.startswith("INFO:") for line in lines), lines


def scratch_left(tmp: Path) -> list[str]:
    """The server's scratch directories still there: under its TMPDIR, and (with workers)
    the stats ones in /dev/shm."""
    shm = Path("/dev/shm")
    found = [p.name for p in tmp.glob("llmsim-*")]
    return found + ([p.name for p in shm.glob("llmsim-stats-*")] if shm.is_dir() else [])


def in_tmpdir(tmp: Path, *args: str) -> LiveServer:
    return LiveServer("--profile", "instant", *args, env={"TMPDIR": str(tmp)})


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_server_removes_its_scratch_directories(tmp_path, how):
    shm_before = scratch_left(tmp_path)
    server = in_tmpdir(tmp_path, "--workers", "2")
    assert [name for name in scratch_left(tmp_path) if name not in shm_before]   # it made some
    server.proc.send_signal(how)
    server.proc.wait(15)
    assert [name for name in scratch_left(tmp_path) if name not in shm_before] == []


def test_one_worker_keeps_its_store_in_memory_without_scratch_directories(tmp_path):
    shm_before = scratch_left(tmp_path)
    server = in_tmpdir(tmp_path)
    try:
        client = server.client()
        created = client.responses.create(model="gpt-4o", input="Keep me.")
        assert client.responses.retrieve(created.id).output_text == created.output_text
        assert [name for name in scratch_left(tmp_path) if name not in shm_before] == []
    finally:
        server.stop()
