"""vLLM's extra sampling parameters that change an answer (`--compat vllm`, docs/vllm.md).

With `--compat vllm` the request schemas accept vLLM's extras (openapi/vllm.yaml); this module
honours the four that change what is said, for Chat and legacy Completions alike:
`ignore_eos` (the answer runs to exactly `max_tokens`), `min_tokens` (no end, stop string or
stop token before that many), `stop_token_ids` (the answer ends before the first such token)
and `include_stop_str_in_output` (a stop string or stop token stays in the text). The rest
only steer which tokens a real model draws: accepted, without effect. Invariants: a Text that
is returned keeps one piece per token and its exact count; without any of the four, `sampling`
is None and planning is exactly the default's.
"""
from __future__ import annotations

from dataclasses import dataclass

from llmsim.errors import InvalidRequestError
from llmsim.sim import textgen, tokens


@dataclass(frozen=True, slots=True)
class Sampling:
    ignore_eos: bool
    min_tokens: int
    stop_token_ids: frozenset[int]
    include_stop: bool


def sampling(body: dict, most: int) -> Sampling | None:
    """The request's answer-changing vLLM parameters; None when it sets none of them.
    `most`: the request's max_tokens, else the model's output limit (min_tokens above it: 400)."""
    ignore = bool(body.get("ignore_eos"))
    least = body.get("min_tokens") or 0
    if least > most:
        raise InvalidRequestError(f"min_tokens must be less than or equal to max_tokens={most}, got {least}.",
                                  param="min_tokens", code="invalid_value")
    ids = body.get("stop_token_ids") or ()
    include = bool(body.get("include_stop_str_in_output"))
    if not (ignore or least or ids or include):
        return None
    return Sampling(ignore, least, frozenset(ids), include)


def shape(text: textgen.Text, s: Sampling, stops: list[str], cap: int | None, encoding: str) -> textgen.Text:
    """The text as vLLM's stop checker leaves it: lengthened to `cap` (ignore_eos) or to
    `min_tokens`, then cut at the first stop string or stop token after `min_tokens` tokens
    (kept with include_stop_str_in_output). Reaching `cap` this way is a `length` finish."""
    goal = text.tokens
    if s.ignore_eos and cap is not None:
        goal = cap
    goal = max(goal, s.min_tokens if cap is None else min(s.min_tokens, cap))
    if goal > text.tokens:
        text = _extend(text, goal, encoding)
        text = textgen.Text(text.pieces, text.text, text.tokens, cap is not None and text.tokens >= cap)
    elif s.ignore_eos and cap is not None and text.tokens > cap:
        text = _cut(text, cap, encoding)
    stopped = _stopped(text, s, stops, encoding)
    return stopped if stopped is not None else text


def _extend(text: textgen.Text, goal: int, encoding: str) -> textgen.Text:
    """`text` followed by filler (lorem) until it is `goal` tokens long."""
    more = textgen.generate("lorem", goal, None, None, encoding).text
    joined = f"{text.text} {more}" if text.text else more
    enc = tokens.encoding(encoding)
    ids = enc.encode_ordinary(joined)[:goal]
    pieces = textgen._pieces(enc, ids)
    kept = "".join(pieces)
    return textgen.Text(tuple(pieces), kept, tokens.count(kept, encoding), False)


def _cut(text: textgen.Text, n: int, encoding: str) -> textgen.Text:
    pieces = text.pieces[:n]
    kept = "".join(pieces)
    return textgen.Text(pieces, kept, tokens.count(kept, encoding), True)


def _stopped(text: textgen.Text, s: Sampling, stops: list[str], encoding: str) -> textgen.Text | None:
    """The text ended at its first stop string or stop token past `min_tokens`; None: none."""
    start = sum(len(p) for p in text.pieces[:s.min_tokens])       # characters never searched
    best: tuple[int, int] | None = None      # (cut at character, kept characters)
    for stop in stops:
        if stop and (i := text.text.find(stop, start)) >= 0 and (best is None or i < best[0]):
            best = (i, i + len(stop) if s.include_stop else i)
    if s.stop_token_ids:
        enc = tokens.encoding(encoding)
        at = 0
        for n, piece in enumerate(text.pieces):
            if best is not None and at >= best[0]:
                break
            if n >= s.min_tokens:
                ids = enc.encode_ordinary(piece)
                if len(ids) == 1 and ids[0] in s.stop_token_ids:
                    best = (at, at + len(piece) if s.include_stop else at)
                    break
            at += len(piece)
    if best is None:
        return None
    return textgen.before(text, best[1], encoding)


def chat_tokens(turns: list, encoding: str) -> list[int]:
    """Token ids for /tokenize of chat messages (llmsim.sim.inputs.Turn): as many as a Chat
    Completion's prompt_tokens (llmsim.sim.inputs.count), each turn's framing (and image)
    tokens as newlines before its role's and texts' own ids, then the reply's priming."""
    enc = tokens.encoding(encoding)
    newline = enc.encode_ordinary("\n")
    out: list[int] = []
    for turn in turns:
        out += newline * tokens.TOKENS_PER_MESSAGE + enc.encode_ordinary(turn.role)
        for text in turn.texts:
            out += enc.encode_ordinary(text)
        out += newline * (turn.images * tokens.IMAGE_TOKENS)
        if turn.name:
            out += newline * tokens.TOKENS_PER_NAME + enc.encode_ordinary(turn.name)
    return out + newline * tokens.REPLY_PRIMING
