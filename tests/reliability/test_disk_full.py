"""An embedded store on a disk that fills up (a 1 MB tmpfs this test mounts; root only), seen
through the official SDK. LMDB evicts its oldest entries and keeps writing (or, with
`--no-store-evict-when-full`, answers 503); SQLite answers 503, since in WAL mode a full disk
leaves no room even for a delete. Either way: the provider's envelope, never a 500 or a dead
server, and what was stored stays readable."""
from __future__ import annotations

import os
import subprocess

import openai
import pytest

from conftest import LiveServer

pytestmark = [pytest.mark.live, pytest.mark.slow]
MODEL = "gpt-4o"
BIG = "lorem ipsum " * 4000     # ~48 kB of input kept with each response
ROUNDS = 40                     # about twice what 1 MB holds


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MB filesystem of its own."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(server: LiveServer) -> tuple[list, list]:
    """ROUNDS stored responses of ~48 kB: those created, and the errors of those refused."""
    client = server.client(timeout=10)
    created, refused = [], []
    for _ in range(ROUNDS):
        try:
            created.append(client.responses.create(model=MODEL, input=BIG, max_output_tokens=16))
        except openai.APIStatusError as exc:
            refused.append(exc)
    return created, refused


def readable(server: LiveServer, responses: list) -> list:
    client, kept = server.client(timeout=10), []
    for response in responses:
        try:
            kept.append(client.responses.retrieve(response.id).id)
        except openai.NotFoundError:
            pass
    return kept


def test_lmdb_on_a_full_disk_evicts_its_oldest_and_keeps_writing(small_disk):
    server = LiveServer("--profile", "instant", "--store", f"lmdb:{small_disk / 'store'}")
    try:
        created, refused = fill(server)
        kept = readable(server, created)
        print(f"\nLMDB, full 1 MB disk: {len(created)} created, {len(created) - len(kept)} evicted, {len(kept)} kept")
        assert not refused and len(created) == ROUNDS
        assert kept and kept == [r.id for r in created[-len(kept):]], "the newest stay, the oldest go"
        assert len(kept) < ROUNDS, "the disk never filled up"
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["lmdb", "sqlite"])
def test_a_full_disk_without_eviction_answers_503_and_keeps_what_it_has(small_disk, kind):
    store = f"lmdb:{small_disk / 'store'}" if kind == "lmdb" else str(small_disk / "store.sqlite3")
    flags = ("--no-store-evict-when-full",) if kind == "lmdb" else ()     # SQLite cannot evict there
    server = LiveServer("--profile", "instant", "--store", store, *flags)
    try:
        created, refused = fill(server)
        print(f"\n{kind}, full 1 MB disk: {len(created)} created, then {len(refused)} refused")
        assert created and refused, "the disk never filled up"
        assert {exc.status_code for exc in refused} == {503}
        error = refused[0].response.json()["error"]
        assert error["code"] == "service_unavailable" and "full" in error["message"]
        assert readable(server, created) == [r.id for r in created]
        assert server.proc.poll() is None
    finally:
        server.stop()
