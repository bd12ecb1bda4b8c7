"""Background responses across a server's death, seen through the official SDK: a server
killed (SIGKILL) mid-job and started again on the same store (LMDB, SQLite, Redis) shows the
job `failed` with a `server_error` saying the simulator restarted, never `in_progress` for
ever; on a Redis several servers share, a server that starts fails no other live server's
job, and one whose owner runs on another machine is failed once its lease runs out."""
from __future__ import annotations

import time

import orjson
import pytest

from conftest import LiveServer

pytestmark = pytest.mark.slow
MODEL = "gpt-4o"
SLOW = ("--ttft-ms", "0", "--tbt-ms", "50", "--target-tokens", "200")     # a job of ~10 s


def wait_for(condition, timeout: float, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step)
    return condition()


def start_job(server: LiveServer) -> str:
    client = server.client()
    job = client.responses.create(model=MODEL, input="Take your time.", background=True)
    assert wait_for(lambda: client.responses.retrieve(job.id).status == "in_progress", 10)
    return job.id


def killed(server: LiveServer) -> None:
    server.proc.kill()
    server.proc.wait()


@pytest.fixture
def redis_store(redis_url):
    import redis
    url = redis_url.rsplit("/", 1)[0] + "/5"       # a database of this module's own
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.mark.parametrize("kind", ["lmdb", "sqlite", "redis"])
def test_a_job_of_a_killed_server_reads_failed_after_a_restart(tmp_path, request, kind):
    store = {"lmdb": lambda: f"lmdb:{tmp_path / 'store'}", "sqlite": lambda: str(tmp_path / "store.sqlite3"),
             "redis": lambda: request.getfixturevalue("redis_store")}[kind]()
    first = LiveServer(*SLOW, "--store", store)
    try:
        job = start_job(first)
    finally:
        killed(first)
    second = LiveServer("--profile", "instant", "--store", store)
    try:
        client = second.client()
        started = time.monotonic()
        after = wait_for(lambda: (r := client.responses.retrieve(job)).status != "in_progress" and r, 10)
        elapsed = time.monotonic() - started
        print(f"\n{kind}: the killed server's job read {after.status} {elapsed * 1000:.0f} ms after the restart")
        assert after and after.status == "failed"
        assert after.error.code == "server_error" and "restarted" in after.error.message
        with client.responses.retrieve(job, stream=True) as stream:     # its stream ends too
            assert [event.type for event in stream][-1] == "response.failed"
    finally:
        second.stop()


def test_hosts_sharing_redis_fail_only_the_jobs_of_gone_owners(redis_store):
    import redis
    lease = ("--background-lease-s", "0.6")
    running = LiveServer(*SLOW[:4], "--target-tokens", "60", "--store", redis_store, *lease)
    doomed = LiveServer(*SLOW, "--store", redis_store, *lease)
    try:
        live_job = start_job(running)
        orphan = start_job(doomed)
        # as if `doomed` ran on another machine (its owner named so, with the lease it renews):
        # only the lease (0.6 s) can tell it is gone
        db, key = redis.Redis.from_url(redis_store), f"llmsim:resp:{orphan}"
        meta = orjson.loads(db.hget(key, "meta"))
        meta["owner"] = "elsewhere|" + meta["owner"].split("|", 1)[1]
        db.set(f"llmsim:lease:{meta['owner']}", b"1", px=600)
        db.hset(key, "meta", orjson.dumps(meta))
        killed(doomed)
        client = running.client()
        started = time.monotonic()
        failed = wait_for(lambda: (r := client.responses.retrieve(orphan)).status != "in_progress" and r, 10)
        elapsed = time.monotonic() - started
        print(f"\nanother machine's job read {failed.status} {elapsed * 1000:.0f} ms after its server died "
              "(lease 600 ms)")
        assert failed and failed.status == "failed" and "restarted" in failed.error.message
        assert elapsed > 0.3, "failed while its owner's lease still ran"
        assert client.responses.retrieve(live_job).status == "in_progress"     # swept, but its owner lives
        third = LiveServer("--profile", "instant", "--store", redis_store, *lease)  # a server starting
        try:
            done = wait_for(lambda: (r := third.client().responses.retrieve(live_job)).status != "in_progress"
                            and r, 20)
            assert done and done.status == "completed"
        finally:
            third.stop()
    finally:
        running.stop()
        doomed.stop()
