"""Shared fixtures: live llmsim servers (real uvicorn subprocesses) and in-process apps."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """`llmsim serve` in a subprocess on a free port; `.url` is its root, `.base` the /v1 base."""

    def __init__(self, *args: str, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.base = f"{self.url}/v1"
        cmd = [sys.executable, "-m", "llmsim", "serve", "--port", str(self.port), *args]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **(env or {})},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._wait()

    def _wait(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llmsim exited: {self.proc.stdout.read().decode()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("llmsim did not become healthy in time")

    def client(self, **kwargs):
        from openai import OpenAI
        return OpenAI(base_url=self.base, api_key="sk-test", max_retries=0, **kwargs)

    def async_client(self, **kwargs):
        from openai import AsyncOpenAI
        return AsyncOpenAI(base_url=self.base, api_key="sk-test", max_retries=0, **kwargs)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="session")
def live_server_factory():
    """Start extra servers with their own flags: `live_server_factory("--seed", "7")`."""
    started = []

    def start(*args: str, env: dict | None = None) -> LiveServer:
        server = LiveServer(*args, env=env)
        started.append(server)
        return server
    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def server(live_server_factory) -> LiveServer:
    """The shared live server: no simulated latency, default everything else."""
    return live_server_factory("--profile", "instant")


@pytest.fixture(scope="session")
def client(server):
    return server.client()


@pytest.fixture
def app_client():
    """An in-process client for behaviour tests (streams are buffered: no timing checks here)."""
    from llmsim.app import create_app
    from llmsim.settings import Settings

    def make(**settings):
        app = create_app(Settings(**{"profile": "instant", **settings}))
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim")
    return make


@pytest.fixture(scope="session")
def redis_url():
    """A `redis-server` of its own on a free port (skips the test where none is installed)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian package: redis-server)")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--daemonize", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(10)
