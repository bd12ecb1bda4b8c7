"""Shared fixtures: live llmsim servers (real uvicorn subprocesses) and in-process apps."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from llmsim.fleet import warm
from llmsim.testing import Server, free_port  # noqa: F401  (free_port: for tests' own servers)

REPO = Path(__file__).resolve().parents[1]
collect_ignore = ["plugin/example"]     # the README's example of the plugin: run by plugin/wheel_check.sh

# Kinds of test (markers registered in pyproject.toml), given here rather than on each test:
# `live` starts an `llmsim serve` subprocess (through these fixtures, or itself in these
# modules); `slow` takes more than a few seconds (schemathesis, deploy recipes, the pytest
# plugin in a subprocess, hosts in network namespaces); `unit` is everything else: in-process.
# A module's own `server` fixture (like the shared one here) is a live server; so are the
# fixtures named after it. A unit test that starts an llmsim process anyway fails (below).
LIVE_FIXTURES = {"live_server_factory", "llmsim_server", "llmsim_server_factory",
                 "server", "recorded", "renamed", "receiver"}
LIVE_MODULES = {"test_affinity", "test_serve_lifecycle", "test_store_bounds", "test_pytest_plugin",
                "test_deploy", "test_scaleout", "test_data_dir", "test_first_hour", "test_docs_examples",
                "test_fleet",
                # tests/reliability: servers of their own (stopped, killed, filled up)
                "test_admin_access", "test_store_outage", "test_store_full", "test_crashes",
                "test_abusive_clients", "test_shutdown", "test_slow_clients", "test_store_evicts",
                "test_background_restart", "test_disk_full"}
LIVE_TESTS = {      # tests in in-process modules that run `llmsim` (serve, top) in a subprocess
    "test_the_plain_server_answers_without_loading_any_tuned_module",
    "test_the_tuned_server_loads_its_own_protocol",
    "test_tuned_on_an_untested_release_serves_plain_and_says_so_once",
    "test_a_kind_from_a_data_dir_can_be_scheduled_and_given_a_rate",
    "test_bad_scenario_file_stops_start_up",
    "test_broken_template_stops_a_server_with_workers_before_it_listens",
    "test_serve_refuses_a_memory_store_for_several_workers_by_name",
    "test_serve_with_a_bad_config_file_exits_naming_the_key",
    "test_serve_with_a_bad_environment_value_exits_naming_the_key",
    "test_serve_with_an_unknown_profile_exits_listing_the_profiles",
    "test_serve_with_a_missing_config_file_exits_naming_it",
    "test_unreachable_server_is_a_one_line_error",
}
SLOW_MODULES = {"test_schemathesis", "test_schemathesis_anthropic", "test_deploy", "test_pytest_plugin", "test_scaleout"}
SLOW_TESTS = {"test_every_assigned_character_splits_as_in_tiktoken"}     # every Unicode character


def pytest_ignore_collect(collection_path, config):
    """`-m unit` does not import the modules whose every test is of another kind (collecting
    them costs each xdist worker seconds: schemathesis builds its tests as it collects).
    tests/clients (the client matrix: environments of their own to install) is collected only
    when the marker expression names `clients` (`pytest -m clients tests/clients`)."""
    if collection_path == Path(__file__).parent / "clients" and "clients" not in (config.getoption("markexpr") or ""):
        return True
    if config.getoption("markexpr") == "unit" and collection_path.stem in LIVE_MODULES | SLOW_MODULES:
        return True
    return None


def pytest_collection_modifyitems(items):
    for item in items:
        module = item.path.stem
        live = (module in LIVE_MODULES or getattr(item, "originalname", item.name) in LIVE_TESTS
                or item.get_closest_marker("live") is not None       # (a module's pytestmark)
                or not LIVE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())))
        if live:
            item.add_marker(pytest.mark.live)
        slow = module in SLOW_MODULES or getattr(item, "originalname", item.name) in SLOW_TESTS
        if slow:
            item.add_marker(pytest.mark.slow)
        if not live and not slow:
            item.add_marker(pytest.mark.unit)


def _starts_llmsim(args) -> bool:     # `python -m llmsim ...`, `llmsim ...`, `python -c "...llmsim..."`
    words = [str(args)] if isinstance(args, (str, bytes, Path)) else [str(a) for a in args]
    code = words[words.index("-c") + 1] if "-c" in words[:-1] else ""
    return "llmsim" in words or Path(words[0]).name == "llmsim" or "llmsim" in code


@pytest.fixture(autouse=True)
def _unit_tests_start_no_llmsim_process(request, monkeypatch):
    """A test that starts an llmsim process is `live`: starting one in a unit test fails it,
    naming the lists above that would have put it in its group (checked in unit tests only,
    for the test's own time: pytest's monkeypatch undoes it after)."""
    if request.node.get_closest_marker("unit") is None:
        return
    init, test = subprocess.Popen.__init__, request.node.nodeid

    def checked(self, args, *rest, **kwargs):
        if _starts_llmsim(args):
            raise RuntimeError(f"{test} is a unit test but starts {str(args)[:100]}: "
                               "add it to LIVE_TESTS (or its module to LIVE_MODULES) in tests/conftest.py")
        init(self, args, *rest, **kwargs)
    monkeypatch.setattr(subprocess.Popen, "__init__", checked)


# Most of `create_app`, which many in-process tests call, is validating the OpenAPI documents,
# compiling the template directory and parsing YAML: the same work each time. The fleet's
# supervisor remembers each result by the bytes it came from (llmsim.fleet.warm); so does the suite.
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
def app_client():
    """An in-process client for behaviour tests (streams are buffered: no timing checks here)."""
    from llmsim.app import create_app
    from llmsim.settings import Settings

    def make(**settings):
        app = create_app(Settings(**{"profile": "instant", **settings}))
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim")
    return make


@pytest.fixture(scope="module")
def shared_app_client():
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
