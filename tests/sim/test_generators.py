"""Text generators (lorem, echo, fixed, random, sequence) and the target length, in-process."""
from __future__ import annotations

import pytest

from counting import count
from llmsim.sim.textgen import WORDS


async def answer(app_client, body=None, **settings) -> dict:
    async with app_client(**settings) as http:
        response = await http.post("/v1/responses", json={"model": "gpt-4o", "input": "hi", **(body or {})})
    assert response.status_code == 200, response.text
    return response.json()


async def test_lorem_is_the_default(app_client):
    assert (await answer(app_client))["output_text"].startswith("Lorem ipsum dolor sit amet")


@pytest.mark.parametrize("generator", ["lorem", "random", "sequence"])
@pytest.mark.parametrize("target", [1, 17, 250])
async def test_target_tokens_is_the_exact_output_length(app_client, generator, target):
    body = await answer(app_client, generator=generator, target_tokens=target)
    assert body["usage"]["output_tokens"] == target == count(body["output_text"], "gpt-4o")


async def test_echo_repeats_the_last_user_text(app_client):
    body = await answer(app_client, {"input": [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": [{"type": "input_text", "text": "the last question"}]}]},
        generator="echo")
    assert body["output_text"] == "the last question"


async def test_echo_ignores_the_target_length(app_client):
    text = "one two three four five six seven eight nine ten"
    body = await answer(app_client, {"input": text}, generator="echo", target_tokens=3)
    assert body["output_text"] == text and body["status"] == "completed"


async def test_echo_is_cut_by_max_output_tokens(app_client):
    text = "one two three four five six seven eight nine ten"
    body = await answer(app_client, {"input": text, "max_output_tokens": 3}, generator="echo")
    assert body["output_text"] == "one two three"
    assert body["status"] == "incomplete"


async def test_fixed_says_the_configured_text(app_client):
    body = await answer(app_client, generator="fixed", fixed_text="All systems nominal.")
    assert body["output_text"] == "All systems nominal."
    assert body["usage"]["output_tokens"] == count("All systems nominal.", "gpt-4o")


async def test_random_draws_words_from_the_vocabulary(app_client):
    body = await answer(app_client, generator="random", target_tokens=40)
    assert set(body["output_text"].split()) <= set(WORDS)


async def test_random_differs_between_requests(app_client):
    async with app_client(generator="random") as http:
        texts = [(await http.post("/v1/responses", json={"model": "gpt-4o", "input": "hi"})).json()["output_text"]
                 for _ in range(2)]
    assert texts[0] != texts[1]


async def test_sequence_counts_up(app_client):
    words = (await answer(app_client, generator="sequence", target_tokens=40))["output_text"].split()
    assert len(words) >= 10
    assert words == [str(i) for i in range(1, len(words) + 1)]


async def test_max_output_tokens_caps_the_target(app_client):
    body = await answer(app_client, {"max_output_tokens": 5}, target_tokens=50)
    assert body["usage"]["output_tokens"] == 5
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
