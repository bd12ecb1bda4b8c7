"""Plan an embeddings answer: one deterministic unit vector per input, and exact usage.

A text's vector is a random projection of its features (lowercased words and word pairs):
each feature names a fixed pseudo-random vector (SHAKE-128 of the model and the feature, one
signed byte per dimension), and the text's vector is their sum, normalized. Equal texts give
equal vectors; texts sharing most words give nearby ones. A token array is decoded to its
text first, so it embeds as that text does. `dimensions` keeps the first components and
normalizes again (how OpenAI's text-embedding-3 models shorten). Values are float32 (what
`encoding_format: base64` carries, little-endian), the same in both formats.

Gemini's embedContent / batchEmbedContents (`plan_gemini`) embed each request's content (its
parts' text) the same way; `outputDimensionality` shortens as `dimensions` does; a model that
is not an embedding model is Google's 404, as its API answers.
"""
from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from dataclasses import dataclass

from llmsim.errors import InvalidRequestError, NotFoundError
from llmsim.sim import latency, tokens
from llmsim.sim.gemini_plan import camel_case
from llmsim.sim.responses_plan import Context, Usage
from llmsim.sim.plans import Untimed

MAX_INPUT_TOKENS = 8192          # per input, every embedding model
MAX_REQUEST_TOKENS = 300_000     # summed over the inputs of one request
DEFAULT_DIMENSIONS = 1536        # a model the catalogue does not know (--allow-any-model)
WORDS = re.compile(r"\w+")


@dataclass(slots=True)
class Embedding:
    index: int
    vector: list[float]

    @property
    def base64(self) -> str:
        return base64.b64encode(struct.pack(f"<{len(self.vector)}f", *self.vector)).decode()


@dataclass(slots=True)
class EmbeddingPlan(Untimed):     # (llmsim.sim.plans: no token times, nothing to cut)
    model: str
    data: list[Embedding]
    encoding_format: str
    usage: Usage
    first_token_at: float
    end_at: float

    def token_times(self) -> list:
        """No streamed tokens: the answer arrives whole (no inter-token gaps to observe)."""
        return []


def plan_embeddings(body: dict, ctx: Context, known: bool) -> EmbeddingPlan:
    """`known`: the model is in the catalogue (else any model is allowed and gets the default size)."""
    model = ctx.model
    size = model.dimensions or (None if known else DEFAULT_DIMENSIONS)
    if size is None:
        raise InvalidRequestError(f"The model `{model.id}` does not support embeddings.", param="model",
                                  code="invalid_value")
    wanted = body.get("dimensions")
    if wanted is not None:
        if not model.shortens:
            raise InvalidRequestError("This model does not support specifying dimensions.",
                                      param="dimensions", code="invalid_value")
        if wanted > size:
            raise InvalidRequestError(f"This model supports at most {size} dimensions, whereas you "
                                      f"requested {wanted}.", param="dimensions", code="invalid_value")
    texts, counts = _inputs(body["input"], model.encoding)
    if sum(counts) > MAX_REQUEST_TOKENS:
        raise InvalidRequestError(f"Requested {sum(counts)} tokens, max {MAX_REQUEST_TOKENS} tokens per "
                                  "request", param="input", code="max_tokens_per_request")
    salt = f"{model.id}\x00".encode()
    data = [Embedding(i, vector(text, salt, size, wanted or size)) for i, text in enumerate(texts)]
    sched = latency.schedule(ctx.profile, ctx.rng, 0, 0)
    total = sum(counts)
    return EmbeddingPlan(body["model"], data, body.get("encoding_format") or "float",
                         Usage(total, 0, 0, total), sched.first_token, sched.end)


GEMINI_MAX_BATCH = 100           # requests in one batchEmbedContents


def plan_gemini(requests: list[dict], ctx: Context, known: bool, method: str) -> EmbeddingPlan:
    """One vector per Gemini EmbedContentRequest (fields in camelCase), for `method`
    (embedContent | batchEmbedContents, named in errors); `known` as for `plan_embeddings`."""
    model = ctx.model
    size = model.dimensions or (None if known else DEFAULT_DIMENSIONS)
    if size is None:
        raise NotFoundError(f"models/{model.id} is not found for API version v1beta, or is not supported for "
                            f"{method}. Call ListModels to see the list of available models and their "
                            "supported methods.")
    if len(requests) > GEMINI_MAX_BATCH:
        raise InvalidRequestError(f"* BatchEmbedContentsRequest.requests: at most {GEMINI_MAX_BATCH} requests "
                                  "can be in one batch", param="requests")
    data, total, salt = [], 0, f"{model.id}\x00".encode()
    for i, req in enumerate(requests):      # a content without text embeds as the empty text
        text = "".join(part.get("text") or "" for part in (req.get("content") or {}).get("parts") or ())
        keep = req.get("outputDimensionality") or size
        if keep > size:
            raise InvalidRequestError(f"* EmbedContentRequest.output_dimensionality: must be at most {size}",
                                      param="outputDimensionality")
        data.append(Embedding(i, vector(text, salt, size, keep)))
        total += tokens.count(text, model.encoding)
    sched = latency.schedule(ctx.profile, ctx.rng, 0, 0)
    return EmbeddingPlan(model.id, data, "float", Usage(total, 0, 0, total), sched.first_token, sched.end)


def _inputs(given, encoding: str) -> tuple[list[str], list[int]]:
    """The texts to embed and each one's token count; token arrays are decoded."""
    if isinstance(given, str) or (given and isinstance(given[0], int)):
        given = [given]
    texts, counts = [], []
    for i, item in enumerate(given):
        where = "input" if len(given) == 1 else f"input[{i}]"
        if isinstance(item, str):
            if not item:
                raise InvalidRequestError(f"'${where}' is invalid: an input cannot be an empty string.",
                                          param=where, code="invalid_value")
            texts.append(item)
            counts.append(tokens.count(item, encoding))
            continue
        texts.append(decode(item, encoding, where))
        counts.append(len(item))
    for i, n in enumerate(counts):
        if n > MAX_INPUT_TOKENS:
            raise InvalidRequestError(
                f"This model's maximum context length is {MAX_INPUT_TOKENS} tokens, however you requested "
                f"{n} tokens in input[{i}]. Please reduce your prompt.", param="input",
                code="context_length_exceeded")
    return texts, counts


def decode(token_ids: list[int], encoding: str, where: str) -> str:
    """The text of a token array (a 400 naming `where` for an id not in the vocabulary)."""
    enc = tokens.encoding(encoding)
    try:
        return b"".join(map(enc.decode_single_token_bytes, token_ids)).decode("utf-8", "replace")
    except (IndexError, OverflowError, TypeError):
        raise InvalidRequestError(f"'${where}' is invalid: it holds a token id that is not in the "
                                  "model's vocabulary.", param=where, code="invalid_value") from None


def features(text: str) -> list[str]:
    words = WORDS.findall(text.lower())
    return [*words, *(f"{a} {b}" for a, b in zip(words, words[1:]))] or [text]


def vector(text: str, salt: bytes, size: int, keep: int) -> list[float]:
    """The unit vector of `text` (its first `keep` of `size` components, normalized)."""
    rows = [hashlib.shake_128(salt + f.encode()).digest(keep) for f in features(text)]   # (a prefix of size's)
    offset = 127.5 * len(rows)              # bytes 0..255 centred on zero
    sums = [sum(column) - offset for column in zip(*rows)] if len(rows) > 1 else [b - 127.5 for b in rows[0]]
    norm = math.sqrt(math.fsum(x * x for x in sums)) or 1.0
    scaled = [x / norm for x in sums]
    return list(struct.unpack(f"<{keep}f", struct.pack(f"<{keep}f", *scaled)))    # float32 values


GEMINI_METHODS = {"embedContent": "embed", "batchEmbedContents": "batch"}     # method: template shape


def gemini_request(model: str, method: str, body: dict) -> dict:
    """A Gemini embedding request as it is planned (and keyed for replay): its model, method,
    template shape and EmbedContentRequests, camelCased."""
    body = camel_case(body)
    requests = body.get("requests") if method == "batchEmbedContents" else [body]
    return {"model": model, "method": method, "shape": GEMINI_METHODS[method], "requests": requests}
