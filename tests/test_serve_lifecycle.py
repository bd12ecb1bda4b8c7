"""`llmsim serve` as a user runs it in a terminal: a quiet start, a clean Ctrl-C."""
from __future__ import annotations

import signal

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
    return code, server.proc.stdout.read().decode()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_exits_zero_without_a_traceback(workers):
    code, output = interrupt(LiveServer("--profile", "instant", "--workers", workers))
    assert code == 0, output
    assert "Traceback" not in output


def test_start_up_prints_only_uvicorn_info_lines():
    server = LiveServer("--profile", "instant")
    server.stop()
    lines = [line for line in server.proc.stdout.read().decode().splitlines() if line.strip()]
    assert lines and all(line.startswith("INFO:") for line in lines), lines
