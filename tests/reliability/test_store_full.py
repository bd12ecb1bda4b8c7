"""An embedded store whose file is full (`--store-max-bytes`, LMDB's map or SQLite's page
limit), seen through the official SDK: writes get 503 `service_unavailable` in the provider's
envelope, never a 500; what was stored stays readable; deleting entries makes room again."""
from __future__ import annotations

import time

import openai
import pytest

from conftest import LiveServer

pytestmark = pytest.mark.live

MODEL = "gpt-4o"
BIG = "lorem ipsum " * 4000     # ~48 kB of input kept with each response


@pytest.mark.parametrize("kind", ["lmdb", "sqlite"])
def test_a_full_store_answers_503_and_keeps_what_it_has(tmp_path, kind):
    store = f"lmdb:{tmp_path / 'store'}" if kind == "lmdb" else str(tmp_path / "store.sqlite3")
    server = LiveServer("--profile", "instant", "--store", store, "--store-max-bytes", str(512 * 1024),
                        "--no-store-evict-when-full")
    try:
        client = server.client(timeout=10)
        kept = []
        for _ in range(200):
            started = time.monotonic()
            try:
                kept.append(client.responses.create(model=MODEL, input=BIG, max_output_tokens=16))
            except openai.APIStatusError as failed:
                elapsed, exc = time.monotonic() - started, failed
                break
        else:
            pytest.fail("the store never filled up")
        assert exc.status_code == 503, exc.response.text
        error = exc.response.json()["error"]
        assert error["code"] == "service_unavailable" and "full" in error["message"]
        assert elapsed < 2
        assert kept, "nothing was stored before the store was full"
        print(f"\n{kind}: full after {len(kept)} responses; 503 in {elapsed * 1000:.0f} ms")
        assert client.responses.retrieve(kept[0].id).id == kept[0].id      # still readable
        for response in kept[: len(kept) // 2 + 1]:     # room made by deleting the oldest
            client.responses.delete(response.id)
        again = client.responses.create(model=MODEL, input=BIG, max_output_tokens=16)
        assert client.responses.retrieve(again.id).id == again.id
    finally:
        server.stop()
