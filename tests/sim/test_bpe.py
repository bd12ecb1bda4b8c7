"""llmsim's encodings give the token ids tiktoken gives, text for text.

Characters new in Unicode 17.0 (4,699 code points, such as CJK Extension J) are the known
exception: the `regex` package knows them as letters, while tiktoken's Rust regex, on Unicode
16.0, does not, so text holding them may split differently. These tests draw characters
from the ones Python's own tables (Unicode 14.0 on Python 3.11) assign.
"""
from __future__ import annotations

import base64
import random
import sys
import unicodedata
from pathlib import Path

import pytest

from counting import reference
from llmsim.sim import bpe, tokens

REPO = Path(__file__).resolve().parents[2]
SAMPLES = [
    "Hello, world! How's it going? I'M FINE, WE'LL see; they'd've known.",
    "The year 2025 had 365 days; 1234567 is a long number, 3.14159 a short one.",
    "  leading spaces\n\n\ttabs\r\nwindows lines\r\n\r\n   \n trailing   ",
    "path/to/file.py:12: x = f(a, b) // comment\n/* block */\n",
    "大型语言模型的模拟器。日本語のテキストも、カタカナもある。",
    "Привет, МИР! Ёлка и ёжик. Ελληνικά κείμενα. עברית וערבית: مرحبا بالعالم",
    "हिन्दी में लिखा गया पाठ। தமிழ் உரை. ภาษาไทยไม่มีช่องว่าง",
    "emoji 👩‍👩‍👧‍👦 family, flags 🇫🇷🇯🇵, skin 👍🏽, keycap 1️⃣ and ❤️‍🔥",
    "Combining: e\u0301 a\u0308 \u0301alone ǅungla ǈ titlecase ˢmodifier",
    "{\"json\": [1, 2, 3], \"nested\": {\"key\": null, \"ok\": true}}",
    "zero\u200bwidth\u00a0nbsp\u2003em\u3000ideographic\u2028line\u0085next",
    "\x00\x01\x1c\x1d\x1e\x1f control \x7f del",
]


def corpus() -> list[str]:
    files = sorted(REPO.glob("*.md")) + sorted((REPO / "llmsim").glob("*.py"))[:20]
    return SAMPLES + [path.read_text(encoding="utf-8") for path in files]


def fuzz(seed: int, alphabet, count: int = 2000) -> list[str]:
    rng = random.Random(seed)
    return ["".join(alphabet(rng) for _ in range(rng.randrange(1, 120))) for _ in range(count)]


def any_character(rng: random.Random) -> str:
    """Mostly the characters that decide pre-tokens (spaces, apostrophes, letters of each
    case, digits, marks), then any code point that UTF-8 can carry."""
    pick = rng.random()
    if pick < 0.5:
        return rng.choice(" \n\r\t'sStTdDlLvVeErRmM0123456789/.,!-\u0301\u00a0\u3000ǅé")
    while True:
        character = chr(rng.randrange(0x20, 0x3000) if pick < 0.8 else rng.randrange(0x110000))
        if unicodedata.category(character) not in ("Cn", "Cs"):
            return character


def ascii_character(rng: random.Random) -> str:
    return chr(rng.randrange(128)) if rng.random() < 0.5 else rng.choice(" \n\r'sStTlLdDvVeEmM09")


@pytest.fixture(scope="module", params=tokens.ENCODINGS)
def pair(request):
    return tokens.encoding(request.param), reference(request.param)


def test_patterns_are_tiktokens_own(pair):
    ours, theirs = pair
    assert bpe.PATTERNS[ours.name][0] == theirs._pat_str


def test_text_encodes_to_tiktokens_ids(pair):
    ours, theirs = pair
    for text in corpus():
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), text[:80]


def test_random_unicode_text_encodes_to_tiktokens_ids(pair):
    ours, theirs = pair
    for text in fuzz(7, any_character):
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), ascii(text)


@pytest.mark.slow
def test_every_assigned_character_splits_as_in_tiktoken(pair):
    """Each character after letters of either case, a space, a digit, itself and a
    contraction: where the pattern's classes would put it shows in the ids."""
    ours, theirs = pair
    assigned = [chr(code) for code in range(sys.maxunicode + 1)
                if unicodedata.category(chr(code)) not in ("Cn", "Cs")]
    for start in range(0, len(assigned), 64):
        text = "".join(f"a{c}A{c}{c} {c}1{c}'s{c}\n" for c in assigned[start:start + 64])
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), ascii(text[:40])


def test_random_ascii_text_encodes_to_tiktokens_ids(pair):
    ours, theirs = pair
    for text in fuzz(11, ascii_character):
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), ascii(text)


def test_count_is_the_number_of_tiktokens_ids(pair):
    ours, theirs = pair
    texts = corpus() + fuzz(13, any_character, 300) + fuzz(17, ascii_character, 300)
    assert [ours.count(text) for text in texts] == [len(theirs.encode_ordinary(text)) for text in texts]


def test_long_runs_of_letters_encode_to_tiktokens_ids(pair):
    ours, theirs = pair
    rng = random.Random(19)
    runs = ["a" * 5000, "".join(rng.choice("abcXYZ") for _ in range(5000)),
            base64.b64encode(rng.randbytes(6000)).decode(), "字" * 3000]
    for text in runs:
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), text[:40]


def test_tokens_decode_back_to_the_text(pair):
    ours, _ = pair
    for text in corpus():
        ids = ours.encode_ordinary(text)
        assert b"".join(map(ours.decode_single_token_bytes, ids)) == text.encode(), text[:80]


def test_a_text_too_long_to_remember_is_still_counted():
    text = "ab " * (tokens.LONG_TEXT_BUDGET // 4 // 3 + 1)
    assert tokens.count(text, "o200k_base") == len(reference("o200k_base").encode_ordinary(text))
