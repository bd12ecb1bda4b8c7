"""Provider-style identifiers drawn from the request's random generator (so --seed fixes them).
Their formats are data (llmsim/data/ids.yaml, loaded by the simulator into an `Ids`)."""
from __future__ import annotations

import random
from typing import Mapping

DEFAULT_HEX = 48


def make(prefix: str, rng: random.Random, hex_chars: int = DEFAULT_HEX) -> str:
    """`prefix` and `hex_chars` (even) random hex digits."""
    return prefix + rng.getrandbits(hex_chars * 4).to_bytes(hex_chars // 2, "big").hex()


class Ids:
    """Identifier formats by kind (`response`, `message`, ...): `ids.make("response", rng)`."""

    def __init__(self, formats: Mapping[str, Mapping]):
        # kind -> (prefix, random bits, their bytes): `make`'s arguments worked out once
        self.formats = {kind: (f["prefix"], f.get("hex", DEFAULT_HEX) * 4, f.get("hex", DEFAULT_HEX) // 2)
                        for kind, f in formats.items()}

    def make(self, kind: str, rng: random.Random) -> str:
        """As `make(prefix, rng, hex)` (several per request: the arguments looked up at once).
        bytes.hex() is cheaper than printf's "%048x" in C, though it takes more opcodes."""
        prefix, bits, size = self.formats[kind]
        return prefix + rng.getrandbits(bits).to_bytes(size, "big").hex()
