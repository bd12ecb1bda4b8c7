"""Exact token counting, offline: OpenAI's encodings as llmsim.sim.bpe holds them (small tries).

An encoding is loaded once, when first needed (`o200k_base`, which most models use, at
start-up: llmsim.simulator); the heap its loading used is handed back to the OS.
"""
from __future__ import annotations

import ctypes
import gc
from functools import cache, lru_cache

import cachetools

from llmsim.sim import bpe

ENCODINGS = tuple(bpe.PATTERNS)
DEFAULT = "o200k_base"       # the encoding of most models, loaded at start-up

# OpenAI's documented chat accounting: every message costs 3 tokens of framing (4 with a
# name), and every reply is primed with 3 more.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
IMAGE_TOKENS = 85


@cache
def encoding(name: str) -> bpe.Encoding:
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; known: {', '.join(ENCODINGS)}")
    found = bpe.load(name)
    _return_heap()
    return found


def _return_heap() -> None:
    """Loading parses 200k lines into Python objects, freed once the trie is built: hand
    that heap back to the OS (glibc) rather than keep it resident."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):   # not glibc: the memory is reused, just not returned
        pass


SHORT_TEXT = 64          # texts up to this many characters are counted once, then remembered
# Longer texts (a system prompt sent with every request, an agent's history sent again each
# turn) are remembered too, by content, up to this many characters in all.
LONG_TEXT_BUDGET = 2_000_000


def count(text: str, encoding_name: str) -> int:
    if not text:
        return 0
    if len(text) <= SHORT_TEXT:      # roles, names, short prompts: the same few strings again
        return _count_short(text, encoding_name)
    remembered = _long_counts.get((text, encoding_name))
    if remembered is not None:
        return remembered[0]
    counted = encoding(encoding_name).count(text)
    if len(text) <= LONG_TEXT_BUDGET // 4:     # a text that would push out most others is not kept
        _long_counts[text, encoding_name] = (counted, len(text))
    return counted


@lru_cache(maxsize=1024)
def _count_short(text: str, encoding_name: str) -> int:
    return encoding(encoding_name).count(text)


# (text, encoding) -> (count, characters): least recently used first out, by characters held.
_long_counts = cachetools.LRUCache(maxsize=LONG_TEXT_BUDGET, getsizeof=lambda entry: entry[1])
