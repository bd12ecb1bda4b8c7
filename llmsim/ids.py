"""Provider-style identifiers drawn from the request's random generator (so --seed fixes them)."""
from __future__ import annotations

import random


def make(prefix: str, rng: random.Random, hex_chars: int = 48) -> str:
    """`prefix` and `hex_chars` (even) random hex digits."""
    return prefix + rng.randbytes(hex_chars // 2).hex()
