"""Crashes and shutdowns, seen by clients of live servers: a worker of `--workers 2` killed
mid-stream drops only its own connections and is back within seconds; SIGTERM stops
accepting and lets streams in flight finish within `--graceful-timeout`; a persistent store
keeps what was stored across a restart."""
from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time

import httpx
import openai
import pytest

from conftest import LiveServer, wait_for

pytestmark = [pytest.mark.live, pytest.mark.slow]
MODEL = "gpt-4o"
TOKENS = 100


def stream_all(server, events: list, errors: list, **kwargs) -> None:
    """One streamed response, its event types appended to `events` (an error to `errors`)."""
    try:
        with server.client(timeout=30).responses.create(model=MODEL, input="Go on.", stream=True,
                                                        **kwargs) as stream:
            for event in stream:
                events.append(event.type)
    except Exception as exc:    # noqa: BLE001 - what the client saw, asserted by the caller
        errors.append(exc)


def workers_of(server) -> set[int]:
    """The pids of uvicorn's worker processes (spawned children of the supervisor)."""
    pid = server.proc.pid
    children = open(f"/proc/{pid}/task/{pid}/children").read().split()
    workers = set()
    for child in children:
        try:
            if b"spawn_main" in open(f"/proc/{child}/cmdline", "rb").read():
                workers.add(int(child))
        except OSError:     # gone meanwhile
            pass
    return workers


def listeners(port: int) -> int:
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
    return len(out.splitlines())


def test_sigkill_of_one_worker_drops_only_its_streams(tmp_path):
    server = LiveServer("--workers", "2", "--ttft-ms", "0", "--tbt-ms", "20", "--target-tokens", str(TOKENS),
                        "--store", str(tmp_path / "store.sqlite3"))
    try:
        workers = wait_for(lambda: len(workers_of(server)) == 2 and workers_of(server), 30)
        assert workers and len(workers) == 2
        # each worker listens on a socket of its own once it has started (--reuse-port)
        assert wait_for(lambda: listeners(server.port) == 2, 60, 0.2), "both workers should listen"
        runs = [([], []) for _ in range(12)]
        threads = [threading.Thread(target=stream_all, args=(server, *run)) for run in runs]
        for thread in threads:
            thread.start()
        assert wait_for(lambda: all("response.output_text.delta" in events for events, _ in runs), 20)
        victim = sorted(workers)[0]
        killed_at = time.monotonic()
        subprocess.run(["kill", "-9", str(victim)], check=True)
        for thread in threads:
            thread.join(30)
        finished = [events for events, errors in runs if not errors]
        dropped = [errors for events, errors in runs if errors]
        for events in finished:         # every event of the streams the other worker served
            assert events[-1] == "response.completed"
            assert events.count("response.output_text.delta") == TOKENS
        assert finished, f"the surviving worker's streams should finish: {dropped[:2]} {[len(e) for e, _ in runs]}"
        for errors in dropped:          # a dropped connection, not an error answer
            assert isinstance(errors[0], (httpx.HTTPError, openai.APIConnectionError)), errors
        back = wait_for(lambda: len(workers_of(server) - {victim}) == 2, 30)
        elapsed = time.monotonic() - killed_at
        assert back, "the supervisor did not start a new worker"
        print(f"\nSIGKILL: {len(finished)} streams finished whole, {len(dropped)} dropped; "
              f"a new worker within {elapsed:.2f} s")
        assert elapsed < 5
        client = server.client(timeout=10)
        for _ in range(6):              # whichever worker answers
            assert client.responses.create(model=MODEL, input="Still there?").status == "completed"
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["tuned", "plain"])
def test_sigterm_lets_streams_in_flight_finish_and_stops_accepting(kind):
    server = LiveServer("--server", kind, "--ttft-ms", "0", "--tbt-ms", "15", "--target-tokens", str(TOKENS),
                        "--graceful-timeout", "10")
    try:
        runs = [([], []) for _ in range(4)]
        threads = [threading.Thread(target=stream_all, args=(server, *run)) for run in runs]
        for thread in threads:
            thread.start()
        assert wait_for(lambda: all("response.output_text.delta" in events for events, _ in runs), 20)
        server.proc.send_signal(signal.SIGTERM)
        refused = wait_for(lambda: not _accepts(server.port), 5)
        assert refused, "the server still accepts connections after SIGTERM"
        for thread in threads:
            thread.join(30)
        for events, errors in runs:
            assert not errors
            assert events[-1] == "response.completed" and events.count("response.output_text.delta") == TOKENS
        server.proc.wait(20)
        assert server.proc.returncode == 0
    finally:
        server.stop()


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


@pytest.mark.parametrize("store", ["lmdb:store.lmdb", "store.sqlite3"])
def test_a_restart_loses_nothing_stored_and_leaves_nothing_running(tmp_path, store):
    """Killed (no graceful shutdown) and started again: every completed stored response,
    conversation and input item is there; the background response that was running reads
    as failed, with an error saying why, not in_progress forever."""
    kind, _, name = store.rpartition(":")
    path = f"{kind}:{tmp_path / name}" if kind else str(tmp_path / name)
    first = LiveServer("--ttft-ms", "0", "--tbt-ms", "50", "--target-tokens", "200", "--store", path)
    try:
        client = first.client()
        created = client.responses.create(model=MODEL, input=[{"role": "user", "content": "Keep me."}],
                                          max_output_tokens=16)
        conversation = client.conversations.create(items=[{"role": "user", "content": "Still here?"}])
        in_conversation = client.responses.create(model=MODEL, input="And this.", conversation=conversation.id,
                                                  max_output_tokens=16)
        items_before = [item.id for item in client.conversations.items.list(conversation.id)]
        inputs_before = [item.id for item in client.responses.input_items.list(created.id)]
        running = client.responses.create(model=MODEL, input="Take your time.", background=True)
        assert wait_for(lambda: client.responses.retrieve(running.id).status == "in_progress", 10)
    finally:
        first.proc.kill()       # whatever a request was answered must be on disk already
        first.proc.wait()
    second = LiveServer("--profile", "instant", "--store", path)
    try:
        client = second.client()
        assert client.responses.retrieve(created.id).output_text == created.output_text
        assert client.responses.retrieve(in_conversation.id).id == in_conversation.id
        assert [item.id for item in client.responses.input_items.list(created.id)] == inputs_before
        assert [item.id for item in client.conversations.items.list(conversation.id)] == items_before
        after = client.responses.retrieve(running.id)
        assert after.status == "failed"
        assert after.error.code == "server_error" and "restarted" in after.error.message
        with client.responses.retrieve(running.id, stream=True) as stream:    # its stream ends too
            assert [event.type for event in stream][-1] == "response.failed"
    finally:
        second.stop()


def test_a_background_response_a_graceful_shutdown_ended_reads_failed_after_a_restart(tmp_path):
    """SIGTERM with `--graceful-timeout` while a background response runs (no client follows
    it): it is ended and kept `failed`, saying the server shut down, with its stream's events."""
    path = f"lmdb:{tmp_path / 'store.lmdb'}"
    first = LiveServer("--ttft-ms", "0", "--tbt-ms", "50", "--target-tokens", "200", "--store", path,
                       "--graceful-timeout", "0.5")
    try:
        client = first.client()
        running = client.responses.create(model=MODEL, input="Take your time.", background=True)
        assert wait_for(lambda: client.responses.retrieve(running.id).status == "in_progress", 10)
        first.proc.terminate()
        assert first.proc.wait(15) == 0
    finally:
        first.stop()
    second = LiveServer("--profile", "instant", "--store", path)
    try:
        client = second.client()
        after = client.responses.retrieve(running.id)
        assert after.status == "failed"
        assert after.error.code == "server_error" and "shutting down" in after.error.message
        with client.responses.retrieve(running.id, stream=True) as stream:
            events = [event.type for event in stream]
        assert events[0] == "response.created" and events[-1] == "response.failed"
        assert "response.output_text.delta" in events
    finally:
        second.stop()
