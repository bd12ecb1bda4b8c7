"""Simulated log probabilities: per output token, its logprob and the k most likely tokens there.

Planned only when a request asks for them (Chat `logprobs: true`, Responses `include:
["message.output_text.logprobs"]`), from the request's random generator, so `--seed` fixes
them. Each entry's token is one of the answer's pieces, so the tokens concatenate to the
text. The alternatives are other plausible tokens (filler words, common words and
punctuation that the encoding holds as one token). Up to a temperature of 1 the chosen token
is the most likely one; above it, ever more often, it is the second or third (a sampled token
that was not the top), as sampling at a high temperature does.
"""
from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass

from llmsim.sim import textgen, tokens

MAX_TOP = 20                # the most alternatives a request may ask for (top_logprobs)
HOT = 1.0                   # above this temperature the chosen token need not be the top one
COMMON = ("the of and to in a is that for it as with on be at by this from or an are not "
          "was but we can will all one has more").split()
PUNCTUATION = (",", ".", ":", ";", "!", "?", "\n")


@dataclass(slots=True)
class Alternative:
    token: str
    logprob: float
    bytes: list[int]


@dataclass(slots=True)
class TokenLogprob:
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[Alternative]     # the k most likely tokens, most likely first


def off_top(temperature: float | None) -> float:
    """How often the chosen token is not the most likely one, at this temperature."""
    t = 1.0 if temperature is None else temperature
    return 0.0 if t <= HOT else min(0.5, (t - HOT) * 0.5)


def make(pieces: tuple[str, ...] | list[str], k: int, temperature: float | None,
         rng: random.Random, encoding_name: str) -> list[TokenLogprob]:
    """One entry per piece, with k alternatives each."""
    spaced, bare = _pool(encoding_name)
    chance = off_top(temperature)
    out = []
    for piece in pieces:
        rank = 0                 # the chosen token's place among the likely tokens
        if chance and rng.random() < chance:
            rank = 1 if rng.random() < 0.75 else 2
        n = max(k, rank + 1)
        probs = _probs(rng, n, rank)
        pool = spaced if piece.startswith(" ") else bare     # alternatives of the same kind
        others = [t for t in rng.sample(pool, n) if t != piece][:n - 1]
        ranked = [*others[:rank], piece, *others[rank:]]
        logprobs = [math.log(p) for p in probs]
        top = [Alternative(t, lp, list(t.encode())) for t, lp in zip(ranked[:k], logprobs[:k])]
        out.append(TokenLogprob(piece, logprobs[rank], list(piece.encode()), top))
    return out


def _probs(rng: random.Random, n: int, rank: int) -> list[float]:
    """Probabilities of the n most likely tokens, strictly decreasing, summing to less than 1.
    The top is mostly near 1; when a lower-ranked token was sampled (rank > 0) it is lower."""
    top = 1.0 - 0.7 * rng.random() ** 3 if rank == 0 else 0.3 + 0.35 * rng.random()
    probs = [top]
    rest = 1.0 - top
    p = min(rest * (0.5 + 0.45 * rng.random()), top * 0.95)
    for _ in range(n - 1):
        probs.append(p)
        rest -= p
        p = min(p * (0.3 + 0.65 * rng.random()), rest * 0.5)
    return probs


@functools.cache
def _pool(encoding_name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Alternative tokens, words and punctuation that are one token of this encoding: those
    that start with a space, and those that do not."""
    enc = tokens.encoding(encoding_name)
    words = dict.fromkeys([*textgen.WORDS, *textgen.LOREM, *COMMON])
    forms = (form for w in words for form in (w, " " + w, w.capitalize(), " " + w.capitalize()))
    one = tuple(dict.fromkeys(f for f in forms if enc.count(f) == 1))
    return tuple(f for f in one if f.startswith(" ")), (*(f for f in one if not f.startswith(" ")), *PUNCTUATION)
