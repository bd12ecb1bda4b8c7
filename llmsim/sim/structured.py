"""Structured outputs: the answer's text when the request asks for JSON.

Responses `text.format` and Chat `response_format` name the shape: `json_schema` (a value
drawn by `jsonvalues` from the request's schema, from the request's rng, so --seed fixes
it) or `json_object` (an object of a small fixed shape). The value is written as compact
JSON, as OpenAI's models write it, and cut into exact tokens like any other text; a token
cap that cuts it leaves JSON that no longer parses, as OpenAI's does.
"""
from __future__ import annotations

import json
import random
from typing import Any

from llmsim.sim import jsonvalues, textgen

# What `json_object` answers: any JSON object will do; this one has a little of each kind.
JSON_OBJECT = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["answer", "confidence", "tags"],
    "additionalProperties": False,
}


def responses_schema(body: dict) -> dict | None:
    """The schema a Responses request's `text.format` asks the text to fit (None: plain text)."""
    fmt = (body.get("text") or {}).get("format")
    return _schema(fmt, fmt)


def chat_schema(body: dict) -> dict | None:
    """The schema a Chat request's `response_format` asks the content to fit (None: plain text)."""
    fmt = body.get("response_format")
    return _schema(fmt, (fmt or {}).get("json_schema"))


def _schema(fmt: Any, holder: Any) -> dict | None:
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_object":
        return JSON_OBJECT
    if fmt.get("type") == "json_schema" and isinstance(holder, dict):
        schema = holder.get("schema")
        return schema if isinstance(schema, dict) else {"type": "object"}
    return None


def text(schema: dict, rng: random.Random, cap: int | None, encoding: str) -> textgen.Text:
    """A value of `schema` as compact JSON, in tokens (cut at `cap`)."""
    written = json.dumps(jsonvalues.value(schema, rng), ensure_ascii=False, separators=(",", ":"))
    return textgen.generate("fixed", 0, cap, textgen.GenerationInput(rng, "", written), encoding)
