"""`llmsim serve --server tuned|plain`: plain runs on stock uvicorn and connexion (none of
llmsim.server's protocol, request cycle, eager start, accept loop, CPU pinning or GC policy,
and no fast lane); tuned runs only on the releases it was tested with (llmsim.server.versions)
and otherwise serves plain, saying so in one warning."""
from __future__ import annotations

import asyncio
import gc
import logging
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata

import pytest

from conftest import REPO
from llmsim.app import create_app
from llmsim.server.versions import TESTED, choose
from llmsim.settings import Settings
from llmsim.testing import START_TIMEOUT_S, free_port

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

# what reaches into uvicorn's, connexion's or starlette's internals
TUNED_MODULES = ("llmsim.server.corking", "llmsim.server.requestcycle", "llmsim.server.starting",
                 "llmsim.server.accepting", "llmsim.server.affinity", "llmsim.server.context",
                 "llmsim.api.fastpath")
TESTED_RELEASES = {"uvicorn": "0.54.0", "connexion": "3.3.0", "starlette": "1.10.0"}


def installed(**versions: str):
    """A `version_of` for llmsim.server.versions: these versions, else the tested ones."""
    def version_of(package: str) -> str:
        found = {**TESTED_RELEASES, **versions}.get(package)
        if found is None:
            raise metadata.PackageNotFoundError(package)
        return found
    return version_of


def test_the_tested_releases_run_the_tuned_server(caplog):
    with caplog.at_level(logging.WARNING, logger="llmsim"):
        assert choose("tuned", installed()) == "tuned"
    assert caplog.records == []


@pytest.mark.parametrize("package,version", [("uvicorn", "0.55.0"), ("connexion", "3.4.0"),
                                             ("starlette", "1.11.1"), ("uvicorn", "0.29.0"),
                                             ("connexion", "4.0.0rc1")])
def test_an_untested_release_serves_plain_with_one_warning_naming_it(caplog, package, version):
    with caplog.at_level(logging.WARNING, logger="llmsim"):
        assert choose("tuned", installed(**{package: version})) == "plain"
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert f"{package} {version}" in caplog.records[0].getMessage()


def test_plain_asked_for_is_plain_whatever_is_installed(caplog):
    with caplog.at_level(logging.WARNING, logger="llmsim"):
        assert choose("plain", installed(uvicorn="9.0")) == "plain"
    assert caplog.records == []


def test_the_tested_releases_are_the_caps_in_pyproject():
    """The table and the package's dependency bounds say the same: a fresh install gets a
    release the tuned server was tested with."""
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for package, (lowest, beyond) in TESTED.items():
        spec = next(d for d in dependencies if re.match(rf"{package}(\[|>)", d))
        assert f">={lowest}" in spec and f"<{beyond}" in spec, (package, spec)


def test_the_plain_app_leaves_cpythons_garbage_collection_alone():
    before = gc.get_threshold()
    app = create_app(Settings(profile="instant", server="plain"))
    seen = []

    async def lifespan():
        messages = asyncio.Queue()
        for kind in ("lifespan.startup", "lifespan.shutdown"):
            messages.put_nowait({"type": kind})

        async def send(message):
            if message["type"] == "lifespan.startup.complete":
                seen.append((gc.get_threshold(), gc.get_freeze_count()))
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, messages.get, send)

    asyncio.run(lifespan())
    assert seen == [(before, 0)]


# `llmsim serve` in a child process that, once it answers, reports which of TUNED_MODULES
# it loaded, answers one request through the SDK, and stops itself with Ctrl-C.
SERVE = textwrap.dedent("""
    import os, signal, sys, threading, time
    import httpx
    from openai import OpenAI
    import llmsim.server.versions
    from llmsim.cli import main

    port, tested = sys.argv[1], sys.argv[2]
    if tested == "none":        # a world where no installed uvicorn was tested
        llmsim.server.versions.TESTED["uvicorn"] = ("0.1", "0.2")
    url = f"http://127.0.0.1:{port}"

    def probe():
        try:
            deadline = time.monotonic() + %(timeout)s
            while time.monotonic() < deadline:
                try:
                    if httpx.get(url + "/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            print("loaded:", sorted(m for m in %(modules)r if m in sys.modules), flush=True)
            client = OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
            reply = client.responses.create(model="gpt-4o", input="hi")
            print("answered:", reply.status, flush=True)
        finally:
            os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=probe, daemon=True).start()
    sys.exit(main(["serve", "--port", port, "--profile", "instant", "--log-level", "warning",
                   *sys.argv[3:]]))
""") % {"timeout": START_TIMEOUT_S, "modules": TUNED_MODULES}


def serve(*flags: str, tested: str = "installed") -> str:
    done = subprocess.run([sys.executable, "-c", SERVE, str(free_port()), tested, *flags],
                          capture_output=True, text=True, timeout=START_TIMEOUT_S + 30)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.live
def test_the_plain_server_answers_without_loading_any_tuned_module():
    output = serve("--server", "plain")
    assert "loaded: []" in output, output
    assert "answered: completed" in output, output


@pytest.mark.live
def test_the_tuned_server_loads_its_own_protocol():
    output = serve("--server", "tuned")
    assert "llmsim.server.corking" in output.split("loaded:", 1)[1].splitlines()[0], output
    assert "answered: completed" in output, output


@pytest.mark.live
def test_tuned_on_an_untested_release_serves_plain_and_says_so_once():
    output = serve(tested="none")         # --server tuned: the default
    assert "loaded: []" in output, output
    assert "answered: completed" in output, output
    warnings = [line for line in output.splitlines() if "tested with" in line]
    assert len(warnings) == 1 and f"uvicorn {metadata.version('uvicorn')}" in warnings[0], output
