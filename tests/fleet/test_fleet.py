"""`llmsim fleet FILE` (docs/fleet.md): a fleet file starts backends that each serve their own
models, keep their own /metrics, start late, go down on schedule or when the control address
says, and come back; routers (LiteLLM's Router, nginx) in front of a fleet lose no request."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import anthropic
import httpx
import jsonschema
import openai
import pytest
import yaml
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from conftest import REPO, free_port, model_metrics, wait_for

pytestmark = pytest.mark.live

CHAT = [{"role": "user", "content": "Hi"}]


class Fleet:
    """`llmsim fleet` in a subprocess, on a fleet file written from `doc`."""

    def __init__(self, tmp: Path, doc: dict, timeout: float = 120):
        self.file = tmp / "fleet.yaml"
        self.file.write_text(yaml.safe_dump(doc))
        self.control = f"http://127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen([sys.executable, "-m", "llmsim", "fleet", str(self.file),
                                      "--control-port", self.control.rsplit(":", 1)[1]],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env())
        if not wait_for(self._answers, timeout, step=0.1):
            self.stop()
            raise AssertionError(f"the fleet never answered:\n{self.proc.stdout.read().decode()}")

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the fleet exited ({self.proc.returncode}):\n{self.proc.stdout.read().decode()}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.control}/llmsim/fleet", timeout=2).status_code == 200
        return False

    def listing(self) -> dict:
        return {b["name"]: b for b in httpx.get(f"{self.control}/llmsim/fleet", timeout=5).json()["backends"]}

    def url(self, name: str) -> str:
        return self.listing()[name]["url"]

    def state(self, name: str) -> str:
        return self.listing()[name]["state"]

    def down(self, name: str, mode: str, **more) -> dict:
        response = httpx.post(f"{self.control}/llmsim/fleet/{name}/outage", json={"mode": mode, **more}, timeout=5)
        assert response.status_code == 200, response.text
        return response.json()

    def up(self, name: str) -> dict:
        response = httpx.delete(f"{self.control}/llmsim/fleet/{name}/outage", timeout=5)
        assert response.status_code == 200, response.text
        return response.json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMSIM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def openai_client(url: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0, **kwargs)


def api_requests(url: str) -> int:
    return httpx.get(f"{url}/llmsim/stats", timeout=5).json()["requests"]["total"]


FAST = {"ttft_ms": 0, "tbt_ms": 1, "target_tokens": 5}
CONTROL_DOC = yaml.safe_load((REPO / "openapi" / "fleet.yaml").read_text())


def conforms(doc, schema_name: str) -> None:
    """`doc` is what openapi/fleet.yaml says the control address answers (its schema `schema_name`)."""
    def json_schema(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return json_schema(CONTROL_DOC["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]])
            node = {k: json_schema(v) for k, v in node.items() if k != "description"}
            if node.pop("nullable", False):
                node = {"anyOf": [node, {"type": "null"}]}
            return node
        return [json_schema(v) for v in node] if isinstance(node, list) else node
    jsonschema.validate(doc, json_schema({"$ref": f"#/components/schemas/{schema_name}"}))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Three replicas of one small model, one backend with the serving model on (a few slots,
    a prefix cache) serving two providers' models, one serving a Gemini model only."""
    doc = {"backends": [
        {"name": "mini", "replicas": 3, "models": ["gpt-4o-mini"], "settings": FAST},
        {"name": "big", "models": ["gpt-4o", "claude-sonnet-4-5"],
         "settings": {"ttft_ms": 20, "tbt_ms": 40, "target_tokens": 50, "max_concurrency": 2,
                      "prefix_cache": True}},
        {"name": "gem", "models": ["gemini-2.5-flash"], "settings": FAST},
    ]}
    running = Fleet(tmp_path_factory.mktemp("fleet"), doc)
    yield running
    running.stop()


# ---- the fleet file --------------------------------------------------------------------------

def run_fleet(tmp_path: Path, doc) -> subprocess.CompletedProcess:
    path = tmp_path / "fleet.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return subprocess.run([sys.executable, "-m", "llmsim", "fleet", str(path)], capture_output=True,
                          text=True, timeout=120, env=_env())


@pytest.mark.parametrize("doc, where, fix", [
    ({"backends": [{"name": "a", "outages": [{"at_s": 1, "for_s": 2, "mode": "down"}]}]},
     "at backends[0].outages[0].mode", "refuse (the port is closed)"),
    ({"backends": [{"name": "a", "settings": {"ttft_ms": -1}}]},
     "at backends[0].settings: at ttft_ms", "milliseconds >= 0"),
    ({"backends": [{"name": "a", "settings": {"colour": "blue"}}]},
     "at backends[0].settings: unknown setting 'colour'", "docs/configuration.md lists every setting"),
    ({"backends": [{"name": "a", "settings": {"port": 9000}}]},
     "at backends[0].settings.port", "use the backend's port: instead"),
    ({"backends": [{"name": "a-1"}, {"name": "a", "replicas": 2}]},
     "at backends[1].name: 'a-1' is also a backend of backends[0]", "a name of its own"),
    ({"backends": [{"name": "a", "port": 9000, "replicas": 2}, {"name": "b", "port": 9001}]},
     "at backends[1].port: port 9001 is also a-1's", "its own ports"),
    ({"backends": [{"name": "a", "outages": [{"at_s": 1, "for_s": 2, "mode": "503", "factor": 3}]}]},
     "at backends[0].outages[0].factor", "use mode: slow"),
    ({"backends": []}, "at backends", "a list of backends"),
])
def test_a_bad_fleet_file_stops_start_up_with_one_line_naming_the_path_and_the_fix(tmp_path, doc, where, fix):
    result = run_fleet(tmp_path, doc)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"llmsim: configuration error: {tmp_path / 'fleet.yaml'}: {where}"), line
    assert fix in line


@pytest.mark.parametrize("bad_first", [True, False])
def test_a_backend_whose_app_cannot_be_built_stops_the_fleet_naming_it(tmp_path, bad_first):
    backends = [{"name": "ok"}, {"name": "bad", "settings": {"profile": "warp"}}]
    result = run_fleet(tmp_path, {"backends": backends[::-1] if bad_first else backends})
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"backends[{0 if bad_first else 1}] (backend bad): profile: unknown latency profile 'warp'" in line


# ---- each backend ----------------------------------------------------------------------------

def test_the_control_address_lists_each_backend_with_its_url_models_and_state(fleet):
    conforms(httpx.get(f"{fleet.control}/llmsim/fleet", timeout=5).json(), "Fleet")
    listing = fleet.listing()
    assert list(listing) == ["mini-0", "mini-1", "mini-2", "big", "gem"]
    ports = [int(listing[f"mini-{n}"]["url"].rsplit(":", 1)[1]) for n in range(3)]
    assert ports == [ports[0], ports[0] + 1, ports[0] + 2]      # replicas on consecutive ports
    assert listing["big"]["models"] == ["gpt-4o", "claude-sonnet-4-5"]
    assert {b["state"] for b in listing.values()} == {"ready"}
    for backend in listing.values():
        assert httpx.get(f"{backend['url']}/health", timeout=5).json()["pid"] == backend["pid"]
        settings = httpx.get(f"{backend['url']}/llmsim/config", timeout=5).json()["settings"]
        assert settings["instance_id"] == backend["name"]       # e.g. OpenTelemetry's service.instance.id
        assert settings["served_models"] == backend["models"]


def test_a_backend_serves_its_models_only_and_others_are_not_found_in_each_providers_envelope(fleet):
    big = fleet.url("big")
    assert [m.id for m in openai_client(big).models.list()] == ["gpt-4o", "claude-sonnet-4-5"]
    assert openai_client(big).chat.completions.create(model="gpt-4o", messages=CHAT).choices[0].message.content
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client(big).chat.completions.create(model="gpt-4o-mini", messages=CHAT)
    assert caught.value.code == "model_not_found"

    claude = anthropic.Anthropic(base_url=big, api_key="sk-ant-test", max_retries=0)
    assert claude.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=CHAT).content
    gem = fleet.url("gem")
    with pytest.raises(anthropic.NotFoundError) as refused:
        anthropic.Anthropic(base_url=gem, api_key="sk-ant-test", max_retries=0).messages.create(
            model="claude-sonnet-4-5", max_tokens=20, messages=CHAT)
    assert refused.value.body["error"]["type"] == "not_found_error"

    gemini = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=gem))
    assert gemini.models.generate_content(model="gemini-2.5-flash", contents="Hi").text
    gemini_big = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=big))
    with pytest.raises(genai_errors.ClientError) as missing:
        gemini_big.models.generate_content(model="gemini-2.5-flash", contents="Hi")
    assert missing.value.code == 404 and missing.value.status == "NOT_FOUND"


def test_each_backends_metrics_count_only_its_own_traffic(fleet):
    big, mini = fleet.url("big"), fleet.url("mini-0")
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    results = []

    prompt = [{"role": "user", "content": "a long question " * 100}]    # blocks for the prefix cache

    def ask():
        results.append(openai_client(big).chat.completions.create(model="gpt-4o", messages=prompt))
    threads = [threading.Thread(target=ask) for _ in range(3)]     # two slots: two run, one waits
    for t in threads:
        t.start()
    try:
        seen = wait_for(lambda: (m := model_metrics(big, "gpt-4o", *names))[:2] == (2.0, 1.0) and m, 30)
        assert seen and seen[:2] == (2.0, 1.0), seen
        assert seen[2] > 0                   # the running requests' prompts are in the prefix cache
        for other in ("mini-0", "mini-1", "gem"):
            assert model_metrics(fleet.url(other), "gpt-4o", *names) == (0.0, 0.0, 0.0)
    finally:
        for t in threads:
            t.join(60)
    assert len(results) == 3
    before = api_requests(mini)
    openai_client(mini).chat.completions.create(model="gpt-4o-mini", messages=CHAT)
    assert api_requests(mini) == before + 1
    assert model_metrics(big, "gpt-4o", "vllm:num_requests_running") == (0.0,)


# ---- outages ---------------------------------------------------------------------------------

def test_the_control_address_takes_a_backend_down_and_up(fleet):
    url = fleet.url("mini-1")
    client = openai_client(url, timeout=5)
    taken = fleet.down("mini-1", "refuse")
    conforms(taken, "Backend")
    assert taken["state"] == "down" and taken["outage"] == {"mode": "refuse", "factor": None, "remaining_s": None}
    try:
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(model="gpt-4o-mini", messages=CHAT)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health", timeout=5)
        assert fleet.state("mini-1") == "down"
        assert fleet.state("mini-0") == "ready"
    finally:
        assert fleet.up("mini-1")["state"] == "ready"
    assert wait_for(lambda: _health(url) == 200, 10) is True
    assert client.chat.completions.create(model="gpt-4o-mini", messages=CHAT).choices[0].finish_reason


def _health(url: str) -> int | None:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{url}/health", timeout=5).status_code
    return None


def test_a_503_outage_answers_every_request_503_in_its_apis_envelope_until_it_ends(fleet):
    url = fleet.url("big")
    fleet.down("big", "503", for_s=60)
    try:
        with pytest.raises(openai.InternalServerError) as caught:
            openai_client(url).chat.completions.create(model="gpt-4o", messages=CHAT)
        assert caught.value.status_code == 503 and caught.value.code == "service_unavailable"
        with pytest.raises(anthropic.APIStatusError) as claude:
            anthropic.Anthropic(base_url=url, api_key="k", max_retries=0).messages.create(
                model="claude-sonnet-4-5", max_tokens=20, messages=CHAT)
        assert claude.value.status_code == 503 and claude.value.body["type"] == "error"
        assert _health(url) == 503
        assert "vllm:num_requests_running" in httpx.get(f"{url}/metrics", timeout=5).text     # still scraped
    finally:
        fleet.up("big")
    assert openai_client(url).chat.completions.create(model="gpt-4o", messages=CHAT).choices


def test_a_hang_outage_holds_requests_until_it_ends_then_answers_them(fleet):
    url = fleet.url("mini-2")
    fleet.down("mini-2", "hang")
    done = []
    try:
        thread = threading.Thread(target=lambda: done.append(
            openai_client(url, timeout=60).chat.completions.create(model="gpt-4o-mini", messages=CHAT)))
        thread.start()
        thread.join(1.5)
        assert done == [] and thread.is_alive()
        assert fleet.state("mini-2") == "down"
    finally:
        fleet.up("mini-2")
    thread.join(30)
    assert len(done) == 1 and done[0].choices[0].finish_reason == "stop"


def test_a_slow_outage_multiplies_every_latency_by_its_factor(fleet):
    url = fleet.url("big")
    client = openai_client(url)

    def ttft() -> float:
        return client.chat.completions.create(model="gpt-4o", messages=CHAT, max_tokens=2).usage.time_to_first_token
    assert ttft() == pytest.approx(20.0)        # milliseconds
    slowed = fleet.down("big", "slow", factor=5, for_s=600)
    conforms(slowed, "Backend")
    assert slowed["state"] == "ready" and slowed["outage"]["factor"] == 5
    try:
        assert ttft() == pytest.approx(100.0)
    finally:
        fleet.up("big")
    assert ttft() == pytest.approx(20.0)        # milliseconds


def test_the_control_address_refuses_bad_outages_and_unknown_backends(fleet):
    post = httpx.post(f"{fleet.control}/llmsim/fleet/mini-0/outage", json={"mode": "down"}, timeout=5)
    assert post.status_code == 400 and post.json()["error"]["param"] == "mode"
    post = httpx.post(f"{fleet.control}/llmsim/fleet/mini-0/outage", json={"mode": "503", "for_s": -1}, timeout=5)
    assert post.status_code == 400 and post.json()["error"]["param"] == "for_s"
    missing = httpx.post(f"{fleet.control}/llmsim/fleet/nope/outage", json={"mode": "503"}, timeout=5)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "backend_not_found"
    assert fleet.state("mini-0") == "ready"


@pytest.mark.slow
def test_scheduled_outages_and_ready_after_s_follow_the_fleet_file(tmp_path):
    running = Fleet(tmp_path, {"backends": [
        {"name": "late", "ready_after_s": 6, "settings": FAST},
        {"name": "flaky", "settings": FAST, "outages": [{"at_s": 0, "for_s": 6, "mode": "503"},
                                                        {"at_s": 8, "for_s": 300, "mode": "refuse"}]},
    ]})
    try:
        late, flaky = running.url("late"), running.url("flaky")
        assert running.state("late") == "starting" and _health(late) == 503
        with pytest.raises(openai.InternalServerError):
            openai_client(late).chat.completions.create(model="gpt-4o", messages=CHAT)
        assert running.state("flaky") == "down" and _health(flaky) == 503
        assert wait_for(lambda: _health(late) == 200, 30) is True
        assert running.state("late") == "ready"
        assert openai_client(late).chat.completions.create(model="gpt-4o", messages=CHAT).choices
        assert wait_for(lambda: _health(flaky) is None, 30) is True     # at 8 s the port closes
        assert running.listing()["flaky"]["outage"]["mode"] == "refuse"
    finally:
        running.stop()
    assert running.proc.returncode == 0
    assert _health(late) is None        # stopping the fleet stops its backends


@pytest.mark.slow
def test_backends_stop_when_their_supervisor_is_killed(tmp_path):
    running = Fleet(tmp_path, {"backends": [{"name": "orphan", "settings": FAST}]})
    url = running.url("orphan")
    assert _health(url) == 200
    running.proc.kill()                 # no chance to stop anything: the backend sees its pipe close
    running.proc.wait()
    assert wait_for(lambda: _health(url) is None, 30) is True


def test_a_backend_sent_sigterm_stops_at_once_though_idle(tmp_path):
    running = Fleet(tmp_path, {"backends": [{"name": "idle", "settings": FAST}]})
    try:
        backend = running.listing()["idle"]
        assert _health(backend["url"]) == 200
        os.kill(backend["pid"], signal.SIGTERM)     # asleep while idle: the signal wakes it to stop
        assert wait_for(lambda: running.state("idle") == "down", 30) is True
        assert _health(backend["url"]) is None
    finally:
        running.stop()


# ---- routers in front of a fleet -------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("mode", ["refuse", "503"])
def test_a_litellm_router_with_retries_and_fallbacks_loses_no_request_when_a_backend_goes_down(fleet, mode, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")     # (no fetch from the internet)
    import litellm  # a test extra; imported here: it takes seconds
    mini = [fleet.url(f"mini-{n}") for n in range(3)]
    model_list = [{"model_name": "mini", "litellm_params": {"model": "openai/gpt-4o-mini", "api_base": f"{url}/v1",
                                                            "api_key": "sk-test"}} for url in mini]
    model_list.append({"model_name": "backup", "litellm_params": {"model": "openai/gpt-4o",
                                                                  "api_base": f"{fleet.url('big')}/v1",
                                                                  "api_key": "sk-test"}})
    router = litellm.Router(model_list=model_list, num_retries=2, retry_after=0, allowed_fails=1,
                            cooldown_time=30, fallbacks=[{"mini": ["backup"]}], routing_strategy="simple-shuffle")
    before = [api_requests(url) for url in mini]
    answered = 0
    try:
        for i in range(24):
            if i == 6:
                fleet.down("mini-1", mode)
            reply = router.completion(model="mini", messages=CHAT, timeout=30)
            answered += bool(reply.choices[0].message.content)
    finally:
        fleet.up("mini-1")
    assert answered == 24
    served = [api_requests(url) - n for url, n in zip(mini, before)]
    assert served[0] > 0 and served[2] > 0


NGINX = """
worker_processes 1;
error_log stderr warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
    upstream fleet {{
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://fleet;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_next_upstream error timeout http_502 http_503 non_idempotent;
            proxy_next_upstream_tries 3;
            proxy_connect_timeout 2s;
            proxy_buffering off;
        }}
    }}
}}
"""


@pytest.fixture
def nginx(fleet, tmp_path):
    nginx_bin = next((p for p in ("/usr/sbin/nginx", "/usr/bin/nginx") if Path(p).exists()), None)
    if nginx_bin is None:
        pytest.fail("nginx is not installed (apt-get install nginx)")
    port = free_port()
    servers = "\n".join(f"        server {re.sub('^http://', '', fleet.url(f'mini-{n}'))} max_fails=1 fail_timeout=30s;"
                        for n in range(3))
    conf = tmp_path / "nginx.conf"
    conf.write_text(NGINX.format(tmp=tmp_path, servers=servers, port=port))
    proc = subprocess.Popen([nginx_bin, "-p", str(tmp_path), "-c", str(conf), "-g", f"daemon off; pid {tmp_path}/nginx.pid;"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: _health(url) == 200, 30), "nginx never answered"
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["refuse", "503"])
def test_nginx_with_passive_health_checks_balances_a_fleet_and_skips_a_backend_that_goes_down(fleet, nginx, mode):
    mini = [fleet.url(f"mini-{n}") for n in range(3)]
    client = openai_client(nginx)

    def ask(n: int) -> None:
        for _ in range(n):
            assert client.chat.completions.create(model="gpt-4o-mini", messages=CHAT).choices[0].finish_reason == "stop"

    before = [api_requests(url) for url in mini]
    ask(6)
    middle = [api_requests(url) for url in mini]
    assert [m - b for m, b in zip(middle, before)] == [2, 2, 2]     # round robin over the three
    fleet.down("mini-1", mode)
    try:
        ask(12)                     # none lost: nginx passes each on to the next, then skips mini-1
    finally:
        fleet.up("mini-1")
    assert wait_for(lambda: _health(mini[1]) == 200, 10) is True
    served = [api_requests(url) - m for url, m in zip(mini, middle)]
    assert served[1] == 0 and served[0] + served[2] == 12 and min(served[0], served[2]) >= 5
