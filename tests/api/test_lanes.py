"""The pipeline's lanes (llmsim.api.pipeline): with no fault schedule or rates a request
without a fault header takes NO_FAULT with no draw; once a schedule is posted the lanes are
written again and every request draws. Both answer the same bytes, and both count."""
from __future__ import annotations

import httpx

SEEDED = ("--profile", "instant", "--seed", "7")
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say something."}]}
RESPONSES = {"model": "gpt-4o-mini", "input": "Say something."}
NEVER = {"schedule": [{"kind": "server_error", "every": 1_000_000}]}      # counts, does not fire here


def _answers(server) -> list:
    client = server.client()
    chat = client.chat.completions.create(**CHAT)
    response = client.responses.create(**RESPONSES)
    with client.chat.completions.create(**CHAT, stream=True) as stream:
        chunks = [chunk.model_dump() for chunk in stream]
    with client.responses.create(**RESPONSES, stream=True) as stream:
        events = [event.model_dump() for event in stream]
    stored = client.responses.retrieve(response.id)
    return [chat.model_dump(), response.model_dump(), chunks, events, stored.model_dump()]


def test_a_request_no_fault_can_reach_answers_as_one_the_fault_stage_passed(live_server_factory):
    quiet, checked = live_server_factory(*SEEDED), live_server_factory(*SEEDED)
    assert httpx.post(checked.url + "/llmsim/faults", json=NEVER).status_code == 200
    assert _answers(quiet) == _answers(checked)
    counted = [httpx.get(server.url + "/llmsim/faults").json()["requests"]
               for server in (quiet, checked)]
    assert counted == [4, 4]        # every generating request counted, whichever lane
