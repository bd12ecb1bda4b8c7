"""A content fault on the Gemini routes (in-process): `truncated_output` cuts the answer in
half and ends it with finishReason MAX_TOKENS, in the body and in the stream."""
from __future__ import annotations

import pytest

from geminiwire import HELLO, MODEL, chunks, client_of, generate

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

TRUNCATED = {"x-llmsim-fault": "truncated_output"}


@pytest.fixture(scope="module")
def gemini_client():
    return client_of()


def test_truncated_output_cuts_the_answer_in_half(gemini_client):
    whole = generate(gemini_client).json()["candidates"][0]
    cut = generate(gemini_client, headers=TRUNCATED).json()["candidates"][0]
    assert cut["finishReason"] == "MAX_TOKENS"
    assert len(cut["content"]["parts"][0]["text"]) < len(whole["content"]["parts"][0]["text"])


def test_truncated_output_ends_the_stream_with_max_tokens(gemini_client):
    response = gemini_client.post(f"/v1beta/models/{MODEL}:streamGenerateContent", params={"alt": "sse"},
                        json=HELLO, headers=TRUNCATED)
    assert response.status_code == 200
    assert chunks(response)[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"
