"""Shared fixtures: live llmsim servers (real uvicorn subprocesses) and in-process apps."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from llmsim.testing import Server, free_port  # noqa: F401  (free_port: for tests' own servers)

REPO = Path(__file__).resolve().parents[1]
collect_ignore = ["plugin_example"]     # the README's example of the plugin: run by plugin_wheel_check.sh


class LiveServer(Server):
    """`llmsim serve` in a subprocess on a free port (llmsim.testing.Server, the pytest
    plugin's server) with these flags; `.url` is its root, `.base` the /v1 base."""

    def __init__(self, *args: str, env: dict | None = None):
        super().__init__(args, env)
        self.base = self.openai_url

    def client(self, **kwargs):
        from openai import OpenAI
        return OpenAI(base_url=self.base, api_key="sk-test", max_retries=0, **kwargs)

    def async_client(self, **kwargs):
        from openai import AsyncOpenAI
        return AsyncOpenAI(base_url=self.base, api_key="sk-test", max_retries=0, **kwargs)


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
