"""One fault schedule for every process sharing a Redis store: two live servers on loopback,
one redis-server (conftest's `redis_url`, databases of this module's own), the official SDK.
"The next N requests" are the next N any of them answers; rates set on one apply on both."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

MODEL = "gpt-4o"


def database(redis_url: str, number: int) -> str:
    """The same redis-server, another database (other modules' servers use 0)."""
    return redis_url.rsplit("/", 1)[0] + f"/{number}"


@pytest.fixture(scope="module")
def pair(redis_url, live_server_factory):
    flags = ("--profile", "instant", "--store", database(redis_url, 2))
    return live_server_factory(*flags), live_server_factory(*flags)


@pytest.fixture(autouse=True)
def no_faults(pair):
    httpx.delete(f"{pair[0].url}/llmsim/faults", timeout=10).raise_for_status()
    yield
    httpx.delete(f"{pair[0].url}/llmsim/faults", timeout=10).raise_for_status()


def faults(server) -> dict:
    return httpx.get(f"{server.url}/llmsim/faults", timeout=10).json()


def post_faults(server, **body) -> dict:
    response = httpx.post(f"{server.url}/llmsim/faults", json=body, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def outcome(client) -> str:
    try:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi."}])
        return "ok"
    except openai.APIStatusError as exc:
        return str(exc.status_code)


def test_the_next_n_requests_fail_across_both_servers(pair):
    post_faults(pair[0], schedule=[{"kind": "rate_limit", "count": 3}])
    clients = [server.client() for server in pair]
    outcomes = [outcome(clients[n % 2]) for n in range(8)]
    assert outcomes == ["429"] * 3 + ["ok"] * 5
    assert faults(pair[0])["schedule"] == faults(pair[1])["schedule"] == []


def test_concurrent_requests_to_both_servers_consume_the_schedule_exactly(pair):
    post_faults(pair[1], schedule=[{"kind": "server_error", "count": 30}])   # more than either answers
    clients = [server.client() for server in pair]
    with ThreadPoolExecutor(12) as pool:
        outcomes = list(pool.map(lambda n: outcome(clients[n % 2]), range(40)))
    assert outcomes.count("500") == 30 and outcomes.count("ok") == 10


def test_every_nth_request_counts_the_requests_of_both_servers(pair):
    post_faults(pair[0], schedule=[{"kind": "overloaded", "every": 2, "count": 2}])
    one, other = (server.client() for server in pair)
    # the 2nd and 4th requests of the two servers together: both on the other server
    assert [outcome(c) for c in (one, other, one, other, one, other)] == ["ok", "503", "ok", "503", "ok", "ok"]


def test_the_schedule_posted_to_one_server_is_shown_by_the_other(pair):
    post_faults(pair[0], schedule=[{"kind": "rate_limit", "count": 2, "retry_after": 1.5}])
    assert outcome(pair[0].client()) == "429"
    shown = faults(pair[1])["schedule"]
    assert [(e["kind"], e["count"], e["fired"], e["remaining"], e["retry_after"]) for e in shown] == [
        ("rate_limit", 2, 1, 1, 1.5)]


def test_replacing_and_clearing_on_one_server_changes_the_other(pair):
    post_faults(pair[0], schedule=[{"kind": "rate_limit", "count": 5}])
    post_faults(pair[1], schedule=[{"kind": "permission", "count": 1}], replace=True)
    assert [e["kind"] for e in faults(pair[0])["schedule"]] == ["permission"]
    httpx.delete(f"{pair[1].url}/llmsim/faults", timeout=10).raise_for_status()
    assert faults(pair[0])["schedule"] == []
    assert outcome(pair[0].client()) == "ok"


def test_rates_set_on_one_server_apply_on_the_other(pair):
    post_faults(pair[0], errors={"rate_limit": 1.0})
    assert outcome(pair[1].client()) == "429"
    assert faults(pair[1])["rates"] == {"rate_limit": 1.0}
    httpx.delete(f"{pair[1].url}/llmsim/faults", timeout=10).raise_for_status()
    assert outcome(pair[0].client()) == "ok"


def test_servers_started_with_one_configured_schedule_share_it_once(redis_url, live_server_factory):
    flags = ("--profile", "instant", "--store", database(redis_url, 3),
             "--fault-schedule", '[{"kind": "rate_limit", "count": 2}]')
    one, other = live_server_factory(*flags), live_server_factory(*flags)
    outcomes = [outcome(server.client()) for server in (one, other, one, other)]
    assert outcomes == ["429", "429", "ok", "ok"]


def test_a_bad_schedule_posted_to_a_shared_store_is_refused_and_changes_nothing(pair):
    post_faults(pair[0], schedule=[{"kind": "rate_limit", "count": 1}])
    response = httpx.post(f"{pair[1].url}/llmsim/faults", timeout=10,
                          json={"schedule": [{"kind": "no_such_kind"}], "replace": True})
    assert response.status_code == 400 and response.json()["error"]["param"] == "schedule[0].kind"
    assert [e["kind"] for e in faults(pair[0])["schedule"]] == ["rate_limit"]
