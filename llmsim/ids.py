"""Provider-style identifiers drawn from the request's random generator (so --seed fixes them)."""
from __future__ import annotations

import random


def make(prefix: str, rng: random.Random, hex_chars: int = 48) -> str:
    return f"{prefix}{rng.getrandbits(hex_chars * 4):0{hex_chars}x}"
