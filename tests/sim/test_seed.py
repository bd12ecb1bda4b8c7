"""--seed: the same seed and the same requests give the same bytes; another seed does not."""
from __future__ import annotations

import httpx
import pytest

REQUESTS = [
    {"model": "gpt-4o", "input": "hi"},
    {"model": "o3", "input": "think", "reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"]},
    {"model": "gpt-5", "input": "stream it", "stream": True, "reasoning": {"summary": "detailed"}},
    {"model": "claude-haiku-4-5", "input": "short", "max_output_tokens": 9},
]


def transcript(server) -> list[bytes]:
    with httpx.Client(base_url=server.base, timeout=30) as http:
        return [http.post("/responses", json=body).content for body in REQUESTS]


@pytest.fixture(scope="module")
def transcripts(live_server_factory) -> dict[str, list[bytes]]:
    """The same request sequence, once, against three fresh servers."""
    flags = ("--profile", "fast", "--generator", "random", "--target-tokens", "30")
    return {name: transcript(live_server_factory(*flags, "--seed", seed))
            for name, seed in (("a", "1234"), ("b", "1234"), ("other", "99"))}


def test_same_seed_same_requests_same_bytes(transcripts):
    assert transcripts["a"] == transcripts["b"]


def test_different_seed_different_bytes(transcripts):
    assert all(x != y for x, y in zip(transcripts["a"], transcripts["other"]))
