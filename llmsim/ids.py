"""Provider-style identifiers drawn from the request's random generator (so --seed fixes them).
Their formats are data (llmsim/data/ids.yaml, loaded by the simulator into an `Ids`)."""
from __future__ import annotations

import random
from typing import Mapping

DEFAULT_HEX = 48


def make(prefix: str, rng: random.Random, hex_chars: int = DEFAULT_HEX) -> str:
    """`prefix` and `hex_chars` (even) random hex digits."""
    return prefix + rng.getrandbits(hex_chars * 4).to_bytes(hex_chars // 2, "big").hex()


def _digits(hex_chars: int) -> str:
    """The printf format of `hex_chars` hex digits (none: "%.0s" prints nothing)."""
    return f"%0{hex_chars}x" if hex_chars else "%.0s"


class Ids:
    """Identifier formats by kind (`response`, `message`, ...): `ids.make("response", rng)`."""

    def __init__(self, formats: Mapping[str, Mapping]):
        # kind -> (printf format: the prefix and the zero-padded hex digits, random bits): `make`'s
        # arguments worked out once
        self.formats = {kind: (f["prefix"].replace("%", "%%") + _digits(f.get("hex", DEFAULT_HEX)),
                               f.get("hex", DEFAULT_HEX) * 4)
                        for kind, f in formats.items()}

    def make(self, kind: str, rng: random.Random) -> str:
        """As `make(prefix, rng, hex)` (the same digits; several per request: one format each)."""
        form, bits = self.formats[kind]
        return form % rng.getrandbits(bits)
