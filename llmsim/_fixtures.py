"""The fixtures of llmsim's pytest plugin (llmsim.testing registers this module as pytest
configures; see there for what they give)."""
from __future__ import annotations

from typing import Any, Iterator

import pytest

from llmsim.testing import Server, start


@pytest.fixture(scope="session")
def llmsim_server() -> Iterator[Server]:
    """One live llmsim server for the session, with no simulated latency."""
    with start() as server:
        yield server


@pytest.fixture
def llmsim_server_factory() -> Iterator:
    """`llmsim_server_factory(**settings)` starts a live server with these settings (see
    `start`); every one it started is stopped when the test ends."""
    started: list[Server] = []

    def factory(**settings: Any) -> Server:
        server = start(**settings)
        started.append(server)
        return server
    yield factory
    for server in started:
        server.stop()
