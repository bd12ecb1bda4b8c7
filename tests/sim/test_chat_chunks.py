"""A Chat stream's chunks: made one at a time for a single text choice, in the same order as
the full merge by due time that every other plan uses."""
from __future__ import annotations

import pytest

from llmsim.clock import FakeClock
from llmsim.settings import Settings
from llmsim.sim import chat_plan
from llmsim.simulator import Simulator

BODIES = [
    {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]},
    {"model": "o3", "messages": [{"role": "user", "content": "Think"}], "reasoning_effort": "high"},
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Cut"}], "max_tokens": 3},
]


@pytest.fixture(scope="module")
def simulator():
    return Simulator.load(Settings(seed=3, target_tokens=20), FakeClock())


def kinds_and_times(chunks):
    """(kind, at, text) of each chunk: the fields of chat_plan.Chunk, which a plain tuple has too."""
    return [(kind, at, text) for kind, _, at, text, *_ in chunks]


@pytest.mark.parametrize("body", BODIES, ids=lambda b: b["model"])
def test_a_single_text_choice_streams_in_due_time_order(simulator, body):
    plan = chat_plan.plan_chat(body, simulator.context(body["model"]))
    lazy = kinds_and_times(plan.chunks)
    assert lazy == kinds_and_times(chat_plan.merged_chunks(plan.choices))
    assert [kind for kind, _, _ in lazy][::len(lazy) - 1] == ["role", "finish"]


def test_a_content_filter_cut_streams_the_cut_choice(simulator):
    body = BODIES[0]
    plan = chat_plan.plan_chat(body, simulator.context(body["model"]))
    plan.cut(4)
    lazy = kinds_and_times(plan.chunks)
    assert [k for k, _, _ in lazy].count("content") == 4
    assert lazy == kinds_and_times(chat_plan.merged_chunks(plan.choices))
