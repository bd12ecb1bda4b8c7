"""Scale-out across hosts: two llmsim hosts behind nginx (round robin) sharing one Redis, each in
its own network namespace (see netlab.py), driven through the balancer with the official SDK.

Every request through the balancer says which host answered (nginx adds `x-llmsim-upstream`);
nginx alternates strictly, so `Balancer.to(host)` spends at most one `GET /health` to make the
next request land on the host a step needs. Each host is also reachable alone (its own Unix
socket on nginx), for its `/llmsim/stats` and `/llmsim/faults`.

Needs root, iproute2, nginx and redis-server (Debian packages); skipped with the reason
otherwise, except under CI (CI=true), where a missing prerequisite fails the run.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import netlab
import openai
import pytest

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.multihost]

REPO = Path(__file__).resolve().parents[2]
MODEL = "gpt-4o"
PORT = 8000
UPSTREAM = "x-llmsim-upstream"

NGINX_CONF = """\
worker_processes 1;
user root;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log info;
events {{ worker_connections 256; }}
http {{
  access_log {dir}/nginx-access.log;
  client_body_temp_path {dir}/client_body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  keepalive_timeout 0;                 # one request per client connection
  proxy_http_version 1.1;
  proxy_set_header Connection close;   # and per upstream connection: round robin per request
  proxy_buffering off;                 # SSE goes through as it is sent
  proxy_request_buffering off;
  proxy_next_upstream off;             # an injected fault is an answer, never retried elsewhere
  proxy_read_timeout 120s;
  upstream llmsim {{ {servers} }}
  server {{
    listen unix:{dir}/lb.sock;
    location / {{ proxy_pass http://llmsim; add_header {upstream} $upstream_addr always; }}
  }}
{direct}
}}
"""
DIRECT = """\
  server {{ listen unix:{dir}/{name}.sock; location / {{ proxy_pass http://{address}:{port}; }} }}
"""


def prerequisites() -> str | None:
    for binary, package in (("nginx", "nginx"), ("redis-server", "redis-server")):
        if shutil.which(binary) is None:
            return f"needs {binary} (Debian package: {package})"
    return netlab.unavailable()


class Balancer:
    """The SDK and plain HTTP through nginx's round robin; remembers which host answered last."""

    def __init__(self, sock: Path):
        self.last: str | None = None
        self.http = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://lb",
                                 timeout=60, event_hooks={"response": [self._seen]})
        self.sdk = openai.OpenAI(base_url="http://lb/v1", api_key="sk-test", max_retries=0,
                                 http_client=self.http)

    def _seen(self, response: httpx.Response) -> None:
        self.last = response.headers.get(UPSTREAM)

    def to(self, host: str) -> openai.OpenAI:
        """The SDK, with the next request bound for `host` (an `address:port`)."""
        if self.last == host or self.last is None:
            self.http.get("/health")
            if self.last == host:
                self.http.get("/health")
        assert self.last != host
        return self.sdk


class Cluster:
    def __init__(self, lab: netlab.Lab, run: Path, hosts: dict[str, str]):
        self.lab, self.run, self.hosts = lab, run, hosts          # hosts: name -> address:port
        self.lb = Balancer(run / "lb.sock")
        self.direct = {name: httpx.Client(transport=httpx.HTTPTransport(uds=str(run / f"{name}.sock")),
                                          base_url="http://host", timeout=30) for name in hosts}

    def other(self, host: str) -> str:
        return next(h for h in self.hosts.values() if h != host)


def wait_until(check, what: str, timeout: float = 30.0, logs=()):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up in {timeout:.0f} s\n" + "\n".join(logs))
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster():
    reason = prerequisites()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the multi-host test cannot run in CI: {reason}")
        pytest.skip(reason)
    run = Path(tempfile.mkdtemp(prefix="llmsim-mh-"))    # short: Unix socket paths are <= 107 bytes
    lab = netlab.Lab(run)
    try:
        redis_ns, redis_ip = lab.host("redis")
        redis = lab.start(redis_ns, [shutil.which("redis-server"), "--bind", redis_ip, "--port", "6379",
                                     "--save", "", "--appendonly", "no", "--protected-mode", "no",
                                     "--daemonize", "no"], "redis.log")
        wait_until(lambda: redis.poll() is None and "Ready to accept" in lab.log("redis.log"),
                   "redis-server", logs=[lab.log("redis.log")])
        hosts = {}
        for name in ("a", "b"):
            namespace, address = lab.host(name)
            lab.start(namespace, [sys.executable, "-m", "llmsim", "serve", "--host", "0.0.0.0", "--port",
                                  str(PORT), "--store", f"redis://{redis_ip}:6379/0", "--ttft-ms", "200",
                                  "--tbt-ms", "10", "--target-tokens", "100"], f"host-{name}.log", cwd=REPO)
            hosts[name] = f"{address}:{PORT}"
        servers = " ".join(f"server {h};" for h in hosts.values())
        direct = "".join(DIRECT.format(dir=run, name=name, address=h.split(":")[0], port=PORT)
                         for name, h in hosts.items())
        (run / "nginx.conf").write_text(NGINX_CONF.format(dir=run, servers=servers, direct=direct,
                                                          upstream=UPSTREAM))
        lab.start(lab.switch, [shutil.which("nginx"), "-e", str(run / "nginx-error.log"), "-p", str(run),
                               "-c", str(run / "nginx.conf"), "-g", "daemon off;"], "nginx.log")
        cluster = Cluster(lab, run, hosts)
        for name in hosts:
            wait_until(lambda name=name: cluster.direct[name].get("/health").status_code == 200, f"llmsim host {name}",
                       logs=[lab.log(f"host-{name}.log"), lab.log("nginx.log"), lab.log("nginx-error.log")])
        yield cluster
    finally:
        lab.close()
        shutil.rmtree(run, ignore_errors=True)


def served(cluster: Cluster, host: str) -> None:
    assert cluster.lb.last == host, f"served by {cluster.lb.last}, not {host}"


def test_round_robin_alternates_between_the_two_hosts(cluster):
    seen = []
    for _ in range(4):
        cluster.lb.http.get("/health")
        seen.append(cluster.lb.last)
    assert set(seen) == set(cluster.hosts.values())
    assert seen[0] != seen[1] and seen[:2] == seen[2:]


def test_a_response_stored_on_one_host_is_retrieved_listed_chained_deleted_on_the_other(cluster):
    lb = cluster.lb
    created = lb.sdk.responses.create(model=MODEL, input="Stored on one host.")
    one = lb.last
    other = cluster.other(one)
    got = lb.to(other).responses.retrieve(created.id)
    served(cluster, other)
    assert (got.id, got.status, got.output_text) == (created.id, "completed", created.output_text)
    items = list(lb.to(other).responses.input_items.list(created.id))
    served(cluster, other)
    assert [i.content[0].text for i in items] == ["Stored on one host."]
    chained = lb.to(other).responses.create(model=MODEL, input="Go on.", previous_response_id=created.id)
    served(cluster, other)
    explicit = lb.sdk.responses.create(model=MODEL, input=[
        {"role": "user", "content": "Stored on one host."},
        {"role": "assistant", "content": created.output_text}, {"role": "user", "content": "Go on."}])
    assert chained.previous_response_id == created.id
    assert chained.usage.input_tokens == explicit.usage.input_tokens
    lb.to(other).responses.delete(created.id)
    served(cluster, other)
    with pytest.raises(openai.NotFoundError):
        lb.to(one).responses.retrieve(created.id)
    served(cluster, one)


def test_a_background_response_started_on_one_host_is_cancelled_on_the_other(cluster):
    lb = cluster.lb
    queued = lb.sdk.responses.create(model=MODEL, input="Cancel me elsewhere.", background=True)
    one = lb.last
    other = cluster.other(one)
    assert queued.status in ("queued", "in_progress")
    cancelled = lb.to(other).responses.cancel(queued.id)
    served(cluster, other)
    assert cancelled.status == "cancelled"
    time.sleep(1.5)                          # past the time it would have completed (1.2 s)
    assert lb.to(one).responses.retrieve(queued.id).status == "cancelled"
    served(cluster, one)


def test_a_background_response_started_on_one_host_is_polled_to_completed_on_the_other(cluster):
    lb = cluster.lb
    queued = lb.sdk.responses.create(model=MODEL, input="Finish me.", background=True)
    one = lb.last
    other = cluster.other(one)
    assert queued.status in ("queued", "in_progress")
    deadline = time.monotonic() + 30
    while True:
        polled = lb.to(other).responses.retrieve(queued.id)
        served(cluster, other)
        if polled.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert polled.status == "completed"
    assert polled.output_text


def test_a_background_stream_started_on_one_host_resumes_on_the_other(cluster):
    lb = cluster.lb
    with lb.sdk.responses.create(model=MODEL, input="Resume me elsewhere.", background=True,
                                 stream=True) as stream:
        one = lb.last
        head = []
        for event in stream:
            head.append(event.to_dict())
            if event.type == "response.output_text.delta":
                break
    other = cluster.other(one)
    rest = [e.to_dict() for e in lb.to(other).responses.retrieve(
        head[0]["response"]["id"], stream=True, starting_after=head[-1]["sequence_number"])]
    served(cluster, other)
    whole = head + rest
    assert [e["sequence_number"] for e in whole] == list(range(len(whole)))
    assert rest[-1]["type"] == "response.completed"


def test_a_conversation_grows_through_both_hosts(cluster):
    lb = cluster.lb
    conversation = lb.sdk.conversations.create(items=[{"role": "user", "content": "Hello."}])
    first_host = lb.last
    answers = []
    for n, host in enumerate([cluster.other(first_host), first_host, cluster.other(first_host)]):
        answers.append(lb.to(host).responses.create(model=MODEL, input=f"Turn {n}.",
                                                    conversation=conversation.id).output_text)
        served(cluster, host)
    items = list(lb.to(first_host).conversations.items.list(conversation.id, order="asc"))
    assert [(i.role, i.content[0].text) for i in items] == [
        ("user", "Hello."),
        ("user", "Turn 0."), ("assistant", answers[0]),
        ("user", "Turn 1."), ("assistant", answers[1]),
        ("user", "Turn 2."), ("assistant", answers[2])]


def stats(cluster: Cluster, name: str) -> dict:
    response = cluster.direct[name].get("/llmsim/stats")
    assert response.status_code == 200
    return response.json()


def settled(cluster: Cluster, check, timeout: float = 15.0) -> dict:
    """Every host's stats once `check(per_host)` holds (counters settle when a request has ended)."""
    deadline = time.monotonic() + timeout
    while True:
        per_host = {name: stats(cluster, name) for name in cluster.hosts}
        if check(per_host) or time.monotonic() > deadline:
            return per_host
        time.sleep(0.1)


def test_the_stats_of_each_host_add_up_to_the_traffic_through_the_balancer(cluster):
    before = {name: s["requests"]["total"] for name, s in settled(cluster, lambda _: True).items()}
    sent = 10
    served_by = []
    for n in range(sent):
        cluster.lb.sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"n{n}"}],
                                               max_tokens=1)
        served_by.append(cluster.lb.last)
    by_name = {name: served_by.count(host) for name, host in cluster.hosts.items()}
    after = settled(cluster, lambda per_host: sum(s["requests"]["total"] for s in per_host.values())
                    - sum(before.values()) >= sent)
    counted = {name: after[name]["requests"]["total"] - before[name] for name in cluster.hosts}
    assert counted == by_name == {name: sent // 2 for name in cluster.hosts}
    assert sum(counted.values()) == sent


def injected(cluster: Cluster) -> dict[str, int]:
    """Faults each host injected so far, by host name (its own count, from GET /llmsim/faults)."""
    return {name: sum(client.get("/llmsim/faults").json()["injected"].values())
            for name, client in cluster.direct.items()}


def outcome(lb: Balancer) -> tuple[str, str]:
    try:
        lb.sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi."}],
                                      max_tokens=1)
        return "ok", lb.last
    except openai.APIStatusError as exc:
        return str(exc.status_code), lb.last


def test_the_next_n_failures_scheduled_through_the_balancer_happen_exactly_n_times(cluster):
    before = injected(cluster)
    posted = cluster.lb.http.post("/llmsim/faults", json={"schedule": [{"kind": "rate_limit", "count": 3}],
                                                          "replace": True})
    assert posted.status_code == 200
    outcomes = [outcome(cluster.lb) for _ in range(8)]
    assert [status for status, _ in outcomes] == ["429"] * 3 + ["ok"] * 5
    assert {host for status, host in outcomes if status == "429"} == set(cluster.hosts.values())
    after = injected(cluster)
    assert sum(after.values()) - sum(before.values()) == 3
    for client in cluster.direct.values():
        assert client.get("/llmsim/faults").json()["schedule"] == []


def test_concurrent_requests_through_the_balancer_consume_a_schedule_exactly(cluster):
    """16 of 24 requests: more than either host answers (12 each), so only one schedule for
    both hosts makes exactly 16 fail, and each host injects some."""
    from concurrent.futures import ThreadPoolExecutor
    before = injected(cluster)
    cluster.lb.http.post("/llmsim/faults", json={"schedule": [{"kind": "server_error", "count": 16}],
                                                 "replace": True}).raise_for_status()
    with ThreadPoolExecutor(8) as pool:
        statuses = [status for status, _ in pool.map(lambda _: outcome(cluster.lb), range(24))]
    assert statuses.count("500") == 16 and statuses.count("ok") == 8
    after = injected(cluster)
    assert sum(after.values()) - sum(before.values()) == 16
    assert all(after[name] > before[name] for name in cluster.hosts)
