"""Latency profiles (data/profiles.yaml) and the schedule of one answer.

A profile is two normal distributions in milliseconds: time to first token and the gap
between tokens. The schedule turns them into absolute due times (seconds after the
request began), so pacing never drifts: each event waits for its own deadline.
"""
from __future__ import annotations

import itertools
import math
import random
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from llmsim import datafiles


@dataclass(frozen=True, slots=True)
class Dist:
    mean: float   # ms
    sd: float     # ms

    def sample(self, rng: random.Random) -> float:
        """One draw, in seconds, never negative."""
        if not self.sd:
            return self.mean / 1000.0
        return max(0.0, rng.gauss(self.mean, self.sd)) / 1000.0

    def sample_sum(self, n: int, rng: random.Random) -> float:
        """The sum of n draws, in seconds (one draw of the sum's distribution)."""
        if n <= 0:
            return 0.0
        if not self.sd:
            return n * self.mean / 1000.0
        return max(0.0, rng.gauss(n * self.mean, math.sqrt(n) * self.sd)) / 1000.0


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    ttft: Dist
    tbt: Dist
    serving: dict | None = None     # the serving model's parameters (llmsim.state.serving)

    @property
    def instant(self) -> bool:
        return not (self.ttft.mean or self.ttft.sd or self.tbt.mean or self.tbt.sd)


def load_profiles(path: Path) -> dict[str, Profile]:
    doc = datafiles.load(path, "profiles")
    return {name: Profile(name, Dist(**p["ttft"]), Dist(**p["tbt"]), p.get("serving"))
            for name, p in doc["profiles"].items()}


@dataclass(slots=True)       # not frozen: one per request, and frozen fields cost a setattr each
class Schedule:
    """When things are due, in seconds after the request began."""
    first_token: float             # first token of any kind (reasoning or visible)
    reasoning_end: float           # equals first_token when there is no reasoning
    token_times: Sequence[float]   # one per visible token (an array of doubles)
    end: float


def schedule(profile: Profile, rng: random.Random, reasoning_tokens: int, visible_tokens: int) -> Schedule:
    ttft, tbt = profile.ttft, profile.tbt         # draws with no spread made in place
    first = ttft.sample(rng) if ttft.sd else ttft.mean / 1000.0
    reasoning_end = first + tbt.sample_sum(reasoning_tokens, rng) if reasoning_tokens > 0 else first
    if visible_tokens <= 0:
        return Schedule(first, reasoning_end, (), reasoning_end)
    if tbt.sd:
        times = array("d", itertools.accumulate((tbt.sample(rng) for _ in range(visible_tokens - 1)),
                                                initial=reasoning_end))      # 8 bytes a time
    else:
        times = fixed_times(reasoning_end, tbt.mean / 1000.0, visible_tokens)
    return Schedule(first, reasoning_end, times, times[-1])


_FIXED: dict[tuple[float, float, int], Sequence[float]] = {}
MAX_FIXED = 256


def fixed_times(start: float, gap: float, n: int) -> Sequence[float]:
    """n due times `gap` apart from `start`, as a running sum (the same floats as drawing
    fixed gaps). Under a profile with no spread every answer of a length has the same
    times: the first `MAX_FIXED` such sequences are made once and shared, read-only (a
    quarter of the cost of planning an instant answer, and one array for every stream)."""
    key = (start, gap, n)
    times = _FIXED.get(key)
    if times is None:
        times = array("d", itertools.accumulate(itertools.repeat(gap, n - 1), initial=start))
        if len(_FIXED) < MAX_FIXED:
            times = _FIXED[key] = memoryview(times).toreadonly()
    return times


def spread(start: float, end: float, n: int) -> list[float]:
    """n due times evenly spaced after `start`, the last at `end`."""
    if n <= 0:
        return []
    step = (end - start) / n
    return [start + step * (i + 1) for i in range(n)]
