"""Background responses across a server's death on a Redis several servers share, seen
through the official SDK: the jobs of a server killed (SIGKILL) read `failed` with a
`server_error` saying the simulator restarted, never `in_progress` for ever; a server that
starts fails no other live server's job; one whose owner ran on another machine is failed
once its lease runs out. (LMDB and SQLite: tests/reliability/test_crashes.py.)"""
from __future__ import annotations

import threading
import time

import orjson
import pytest

from conftest import LiveServer, wait_for

pytestmark = [pytest.mark.live, pytest.mark.slow]
MODEL = "gpt-4o"
SLOW = ("--ttft-ms", "0", "--tbt-ms", "50", "--target-tokens", "200")     # a job of ~10 s


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


def retrieved_ended(client, response_id: str, timeout: float = 10):
    """The response once it is no longer in progress (None if it still was after `timeout`)."""
    return wait_for(lambda: (r := client.responses.retrieve(response_id)).status != "in_progress" and r, timeout)


def test_jobs_of_a_killed_server_on_redis_fail_and_no_live_job_does(redis_store):
    """Three servers on one Redis: `live` runs a job; `doomed` runs two, one as if from another
    machine, and is killed (SIGKILL); `doomed` is started again. Its own job reads failed as
    the new server starts, the other machine's once that owner's lease runs out; `live`'s job,
    swept by both the others meanwhile, completes."""
    import redis
    lease = ("--background-lease-s", "0.6")
    live = LiveServer(*SLOW[:4], "--target-tokens", "60", "--store", redis_store, *lease)
    doomed = None
    try:
        live_job = start_job(live)
        doomed = LiveServer(*SLOW, "--store", redis_store, *lease)     # its start swept: live_job stays
        own, foreign = start_job(doomed), start_job(doomed)
        # `foreign` as if run on another machine (named so, with the lease it would renew): only
        # that lease (0.6 s) can tell its owner is gone
        db, key = redis.Redis.from_url(redis_store), f"llmsim:resp:{foreign}"
        meta = orjson.loads(db.hget(key, "meta"))
        meta["owner"] = "elsewhere|" + meta["owner"].split("|", 1)[1]
        db.set(f"llmsim:lease:{meta['owner']}", b"1", px=600)
        db.hset(key, "meta", orjson.dumps(meta))
        killed(doomed)
        died = time.monotonic()
        lapsed = []         # the other machine's job, as `live` sees it meanwhile
        watch = threading.Thread(target=lambda: lapsed.append(
            (retrieved_ended(live.client(), foreign), time.monotonic() - died)))
        watch.start()
        doomed = LiveServer("--profile", "instant", "--store", redis_store, *lease)
        client = doomed.client()
        ready = time.monotonic()
        after = retrieved_ended(client, own)
        swept = time.monotonic() - ready
        assert after and after.status == "failed"
        assert after.error.code == "server_error" and "restarted" in after.error.message
        with client.responses.retrieve(own, stream=True) as stream:     # its stream ends too
            assert [event.type for event in stream][-1] == "response.failed"
        watch.join()
        [(other, lapsed)] = lapsed
        assert other and other.status == "failed" and "restarted" in other.error.message
        assert lapsed > 0.3, "failed while its owner's lease still ran"
        assert client.responses.retrieve(foreign).status == "failed"
        done = retrieved_ended(client, live_job, 20)
        assert done and done.status == "completed", "a live server's job was failed"
        print(f"\nredis: the killed server's own job read failed {swept * 1000:.0f} ms after the restart "
              f"was ready; the other machine's {lapsed * 1000:.0f} ms after the kill (lease 600 ms); "
              "the live server's job completed")
    finally:
        live.stop()
        if doomed is not None:
            doomed.stop()
