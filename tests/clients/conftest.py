"""The client matrix (docs/clients.md): other people's clients, each in an environment of its
own pinned releases (clientenvs.py), against live servers with simulated latency. Run it
with `python -m pytest -m clients tests/clients`; the default `pytest` run leaves this
directory out (tests/conftest.py): its environments take minutes and gigabytes to install.
"""
from __future__ import annotations

import pytest

from clientenvs import HERE, MATRIX_FLAGS


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.clients)


@pytest.fixture(scope="session")
def matrix_server(live_server_factory):
    """The server every client flow talks to: default settings but for latency (MATRIX_FLAGS)."""
    return live_server_factory(*MATRIX_FLAGS)
