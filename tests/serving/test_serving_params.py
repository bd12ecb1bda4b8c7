"""The serving model's parameters: a setting wins over the profile, off when neither says,
and the load slowdown's factor (llmsim.state.serving)."""
from __future__ import annotations

import pytest

from llmsim.settings import Settings
from llmsim.sim.latency import Dist, Profile
from llmsim.state.serving import params

PLAIN = Profile("plain", Dist(100, 0), Dist(10, 0))
SERVED = Profile("served", Dist(100, 0), Dist(10, 0), {"max_concurrency": 4, "load_slowdown": 3.0})


def test_off_unless_a_setting_or_the_profile_turns_it_on():
    assert params(Settings(), PLAIN) is None
    assert params(Settings(), SERVED).max_concurrency == 4
    assert params(Settings(prefix_cache=True), PLAIN).prefix_cache


def test_a_setting_wins_over_the_profile():
    assert params(Settings(max_concurrency=2), SERVED).max_concurrency == 2
    assert params(Settings(max_concurrency=2), SERVED).load_slowdown == 3.0


@pytest.mark.parametrize("running, expected", [(0, 1.0), (1, 1.0), (2, 1 + 2 / 3), (3, 1 + 4 / 3), (4, 3.0), (9, 3.0)])
def test_the_gap_factor_grows_linearly_with_the_running_requests(running, expected):
    assert params(Settings(), SERVED).factor(running) == pytest.approx(expected)


def test_no_slowdown_without_slots():
    assert params(Settings(load_slowdown=3.0), PLAIN).factor(10) == 1.0
