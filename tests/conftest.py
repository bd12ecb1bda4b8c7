"""Shared fixtures: live llmsim servers (real uvicorn subprocesses) and in-process apps."""
from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import httpx
import pytest

from llmsim.fleet import warm
from llmsim.testing import Server, free_port  # noqa: F401  (free_port: for tests' own servers)

REPO = Path(__file__).resolve().parents[1]
collect_ignore = ["plugin/example"]     # the README's example of the plugin: run by plugin/wheel_check.sh

# Kinds of test (markers registered in pyproject.toml). `live` starts an `llmsim serve`
# subprocess; `slow` takes more than a few seconds (schemathesis, deploy recipes, the pytest
# plugin in a subprocess, hosts in network namespaces); `unit` is everything else: in-process.
# A module whose every test is of a kind says so in its `pytestmark`, a single test with
# `@pytest.mark.live`/`slow`. A test that takes a live-server fixture (a module's own `server`
# fixture, like the shared one here, and those named after it) is `live` without saying so.
# A unit test that starts an llmsim process anyway fails (below).
LIVE_FIXTURES = {"live_server_factory", "llmsim_server", "llmsim_server_factory",
                 "server", "recorded", "renamed", "receiver"}
NOT_UNIT = {"live", "slow"}


def module_kinds(path: Path) -> set[str]:
    """The markers a test module's `pytestmark` names, read from its source (not imported)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError):
        return set()
    return {node.attr for statement in tree.body if isinstance(statement, ast.Assign)
            and any(getattr(target, "id", None) == "pytestmark" for target in statement.targets)
            for node in ast.walk(statement.value) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"}


def pytest_ignore_collect(collection_path, config):
    """`-m unit` does not import the modules whose `pytestmark` makes every test of another
    kind (collecting them costs each xdist worker seconds: schemathesis builds its tests as
    it collects). tests/clients (the client matrix: environments of their own to install) is
    collected only when the marker expression names `clients` (`pytest -m clients tests/clients`)."""
    if collection_path == Path(__file__).parent / "clients" and "clients" not in (config.getoption("markexpr") or ""):
        return True
    if (config.getoption("markexpr") == "unit" and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_") and module_kinds(collection_path) & NOT_UNIT):
        return True
    return None


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("live") is None and not LIVE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.live)
        if all(item.get_closest_marker(kind) is None for kind in NOT_UNIT):
            item.add_marker(pytest.mark.unit)


def _starts_llmsim(args) -> bool:     # `python -m llmsim ...`, `llmsim ...`, `python -c "...llmsim..."`
    words = [str(args)] if isinstance(args, (str, bytes, Path)) else [str(a) for a in args]
    code = words[words.index("-c") + 1] if "-c" in words[:-1] else ""
    return "llmsim" in words or Path(words[0]).name == "llmsim" or "llmsim" in code


class UnitTestsStartNoLlmsim:
    """A test that starts an llmsim process is `live`: starting one while a unit test runs
    fails it, saying how to mark it. Seen through Python's `subprocess.Popen` audit event
    (sys.addaudithook: public, and nothing of subprocess replaced); a hook stays for the
    process, so it checks only while `unit_test` names the running unit test."""

    def __init__(self):
        self.unit_test: str | None = None
        sys.addaudithook(self.audit)

    def audit(self, event: str, args: tuple) -> None:
        if event == "subprocess.Popen" and self.unit_test is not None and _starts_llmsim(args[1]):
            raise RuntimeError(f"{self.unit_test} is a unit test but starts {str(args[1])[:100]}: mark it "
                               "live (@pytest.mark.live, or its module's pytestmark = pytest.mark.live)")


GUARD = pytest.StashKey[UnitTestsStartNoLlmsim]()


def pytest_configure(config):
    config.stash[GUARD] = UnitTestsStartNoLlmsim()


@pytest.fixture(autouse=True)
def _unit_tests_start_no_llmsim_process(request):
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    guard = request.config.stash[GUARD]
    guard.unit_test = request.node.nodeid
    try:
        yield
    finally:
        guard.unit_test = None


@pytest.fixture(scope="session")
def warm_caches():
    """Most of `create_app` is validating the OpenAPI documents, compiling the template
    directory and parsing YAML: the same work each time (about 1.8 s an app, 0.1 s warm). The
    fleet's supervisor remembers each result by the bytes it came from (llmsim.fleet.warm);
    so does a test process once a fixture that builds apps asks for this (app_client,
    shared_app_client, and modules that build their own: `pytest.mark.usefixtures`)."""
    warm.install()


class LiveServer(Server):
    """`llmsim serve` in a subprocess on a free port (llmsim.testing.Server, the pytest
    plugin's server) with these flags; `.url` is its root, `.base` the /v1 base."""

    def __init__(self, *args: str, env: dict | None = None):
        super().__init__(args, env, timeout=120)    # generous: the machine may be busy
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


def model_metrics(url: str, model: str, *names: str) -> tuple[float, ...]:
    """The values of the `/metrics` series `names` for `model` (0.0 for one not there)."""
    found = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        name, _, rest = line.partition("{")
        if name in names and rest.startswith(f'model_name="{model}"}}'):
            found[name] = float(line.split()[-1])
    return tuple(found.get(name, 0.0) for name in names)


def wait_for(condition, timeout: float, step: float = 0.02):
    """`condition()`'s first truthy value within `timeout` seconds (else its last value)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step)
    return condition()


SERVERS = ("tuned", "plain")    # `llmsim serve --server`: conformance modules run on both


@pytest.fixture(scope="session")
def served(live_server_factory):
    """`served(kind)`: the shared live server of that kind (`--server tuned|plain`), no
    simulated latency, default everything else; started on first use."""
    started: dict[str, LiveServer] = {}

    def get(kind: str) -> LiveServer:
        if kind not in started:
            started[kind] = live_server_factory("--profile", "instant", "--server", kind)
        return started[kind]
    return get


@pytest.fixture(scope="module")
def server(request, served) -> LiveServer:
    """The shared live server: no simulated latency, default everything else. In a module
    that sets `ON_BOTH_SERVERS = True`, each test runs on both (`--server tuned` and `plain`)."""
    return served(getattr(request, "param", "tuned"))


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def pytest_generate_tests(metafunc):
    if getattr(metafunc.module, "ON_BOTH_SERVERS", False) and "server" in metafunc.fixturenames:
        metafunc.parametrize("server", SERVERS, indirect=True, scope="module")


@pytest.fixture
def app_client(warm_caches):
    """An in-process client for behaviour tests (streams are buffered: no timing checks here)."""
    from llmsim.app import create_app
    from llmsim.settings import Settings

    def make(**settings):
        app = create_app(Settings(**{"profile": "instant", **settings}))
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim")
    return make


@pytest.fixture(scope="module")
def shared_app_client(warm_caches):
    """`app_client`, but one app per settings in the module: for tests whose checks depend on
    no state an app keeps (routing, 404/405, validation errors, headers). A test that changes or
    reads state (fault schedules, stores, stats, seeded generators) takes `app_client`."""
    from llmsim.app import create_app
    from llmsim.settings import Settings
    apps = {}

    def make(**settings):
        key = repr(sorted(settings.items()))
        if key not in apps:
            apps[key] = create_app(Settings(**{"profile": "instant", **settings}))
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=apps[key]), base_url="http://sim")
    return make


@pytest.fixture(scope="session")
def redis_url():
    """A `redis-server` of its own on a free port (skips the test where none is installed)."""
    from redisproc import RedisProcess
    process = RedisProcess()
    yield process.url
    process.stop()


def pytest_report_header(config):
    """Say so when OpenAI's published document is missing (tests/oai_schemas.py: its checks skip)."""
    import oai_schemas
    return None if oai_schemas.SPEC_PATH.is_file() else oai_schemas.MISSING


def pytest_terminal_summary(terminalreporter):
    """SDK_DRIFT_REPORT=1: end with the drift against openai.types of every body and event the
    conformance checks saw (tests/sdk_types.py): fields llmsim never sent, fields unknown to the SDK."""
    import os
    import sys
    if os.environ.get("SDK_DRIFT_REPORT") == "1" and "sdk_types" in sys.modules:
        terminalreporter.section("drift against openai.types")
        terminalreporter.write_line(sys.modules["sdk_types"].report())


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): half again as many workers as CPUs. A live-server test
    spends much of its time waiting for servers in other processes (starting, pacing,
    restarting), so one worker per CPU would leave the CPUs idle meanwhile."""
    import os
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cpus * 3 // 2)
