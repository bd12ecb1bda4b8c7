"""Provider-style identifiers drawn from the request's random generator (so --seed fixes them)."""
from __future__ import annotations

import random


def make(prefix: str, rng: random.Random, hex_chars: int = 48) -> str:
    """`prefix` and `hex_chars` (even) random hex digits."""
    return prefix + rng.getrandbits(hex_chars * 4).to_bytes(hex_chars // 2, "big").hex()
