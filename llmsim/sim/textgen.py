"""Text generators: what the simulated model says, cut into exact tiktoken tokens.

Each generator yields words; `generate` turns them into the token pieces a stream sends
(one delta per token) and the exact count of the text. The table `GENERATORS` maps the
names accepted by `--generator` (or `generator:` in the config) to their functions.
"""
from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from llmsim.sim import tokens

LOREM = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
         "incididunt ut labore et dolore magna aliqua ut enim ad minim veniam quis nostrud "
         "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat duis aute irure "
         "dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur "
         "excepteur sint occaecat cupidatat non proident sunt in culpa qui officia deserunt "
         "mollit anim id est laborum").split()
WORDS = ("time person year way day thing man world life hand part child eye woman place work "
         "week case point government company number group problem fact river signal market "
         "garden window engine planet letter music system answer table ocean forest cloud "
         "bridge street paper energy summer winter morning story question simple quick bright "
         "quiet golden hidden ancient modern gentle steady clever").split()


@dataclass(slots=True)       # not frozen: one per request, and frozen fields cost a setattr each
class GenerationInput:
    rng: random.Random
    prompt_text: str      # the last user text (for echo)
    fixed_text: str       # the configured text (for fixed)


def _lorem(inp: GenerationInput) -> Iterator[str]:
    first = True
    for word in itertools.cycle(LOREM):
        yield word.capitalize() if first else word
        first = False


def _random_words(inp: GenerationInput) -> Iterator[str]:
    while True:
        yield inp.rng.choice(WORDS)


def _sequence(inp: GenerationInput) -> Iterator[str]:
    return (str(i) for i in itertools.count(1))


def _echo(inp: GenerationInput) -> Iterable[str]:
    return [inp.prompt_text] if inp.prompt_text else []


def _fixed(inp: GenerationInput) -> Iterable[str]:
    return [inp.fixed_text] if inp.fixed_text else []


GENERATORS: dict[str, Callable[[GenerationInput], Iterable[str]]] = {
    "lorem": _lorem,
    "random": _random_words,
    "sequence": _sequence,
    "echo": _echo,
    "fixed": _fixed,
}
# Generators that say a given text whatever the target length (only caps cut it).
VERBATIM = {"echo", "fixed"}


@dataclass(frozen=True, slots=True)
class Text:
    pieces: tuple[str, ...]  # one per token, concatenating to `text`
    text: str
    tokens: int               # exact tiktoken count of `text`
    truncated: bool           # cut by the cap before the generator was done


# Generators whose text depends only on (target, cap, encoding): computed once, then reused.
PURE = {"lorem", "sequence"}


def generate(kind: str, target: int, cap: int | None, inp: GenerationInput | None,
             encoding_name: str) -> Text:
    """Produce text of `target` tokens (verbatim generators: their whole text), cut at `cap`.
    `inp` may be None for a PURE generator (it reads none)."""
    if kind in PURE:
        return _pure(kind, target, cap, encoding_name)
    return _generate(kind, target, cap, inp, encoding_name)


@functools.lru_cache(maxsize=4096)
def _pure(kind: str, target: int, cap: int | None, encoding_name: str) -> Text:
    return _generate(kind, target, cap, GenerationInput(random.Random(0), "", ""), encoding_name)


def _generate(kind: str, target: int, cap: int | None, inp: GenerationInput, encoding_name: str) -> Text:
    words = GENERATORS[kind](inp)
    verbatim = kind in VERBATIM
    want = None if verbatim else target
    if not verbatim:
        words = itertools.islice(words, max(want, 0))  # every word is at least one token
    text = " ".join(words)
    enc = tokens.encoding(encoding_name)
    ids = enc.encode_ordinary(text)
    if want is not None and len(ids) > want:
        ids = ids[:want]
    limit = len(ids) if cap is None else min(cap, len(ids))
    truncated = limit < len(ids)
    ids = ids[:limit]
    pieces = _pieces(enc, ids)
    text = "".join(pieces)
    return Text(tuple(pieces), text, tokens.count(text, encoding_name), truncated)


def split(text: str, encoding_name: str) -> list[str]:
    """`text` cut into its tokens' pieces (one stream delta each)."""
    enc = tokens.encoding(encoding_name)
    return _pieces(enc, enc.encode_ordinary(text))


def _pieces(enc, ids: list[int]) -> list[str]:
    """Decode token by token; bytes of a split UTF-8 character wait for the next token."""
    out, pending = [], b""
    for token in ids:
        pending += enc.decode_single_token_bytes(token)
        try:
            out.append(pending.decode("utf-8"))
            pending = b""
        except UnicodeDecodeError:
            continue
    if pending:
        out.append(pending.decode("utf-8", errors="replace"))
    return out


def words_text(n: int, rng: random.Random) -> str:
    """n words of filler, for reasoning summaries."""
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "." if n else ""


def stopped(text: Text, stops: Iterable[str], encoding_name: str) -> tuple[Text, str | None]:
    """The text before the first stop sequence it holds, and that sequence (None: none found).
    The cut falls inside a token when a sequence starts there; empty sequences never match."""
    hits = [(i, stop) for stop in stops if stop and (i := text.text.find(stop)) >= 0]
    if not hits:
        return text, None
    end, found = min(hits, key=lambda hit: hit[0])
    return before(text, end, encoding_name), found


def before(text: Text, end: int, encoding_name: str) -> Text:
    """The text's first `end` characters, its pieces cut there (inside a token if need be)."""
    pieces, length = [], 0
    for piece in text.pieces:
        if length + len(piece) > end:
            if end > length:
                pieces.append(piece[:end - length])
            break
        pieces.append(piece)
        length += len(piece)
    kept = "".join(pieces)
    return Text(tuple(pieces), kept, tokens.count(kept, encoding_name), False)
