"""Structured outputs: the answer's text when the request asks for JSON.

Responses `text.format`, Chat `response_format`, Anthropic's `output_config.format` (or
the beta's top-level `output_format`) and Gemini's `responseMimeType: application/json` with
`responseSchema` (OpenAPI's subset, upper-case types: converted) or `responseJsonSchema`
name the shape: `json_schema` (a value
drawn by `jsonvalues` from the request's schema, from the request's rng, so --seed fixes
it) or `json_object` (an object of a small fixed shape). The value is written as compact
JSON, as OpenAI's models write it, and cut into exact tokens like any other text; a token
cap that cuts it leaves JSON that no longer parses, as OpenAI's does.
"""
from __future__ import annotations

import json
import random
import re
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
    text = body.get("text")
    if text.__class__ is not dict:      # (most requests: none)
        return None
    fmt = text.get("format")
    return _schema(fmt, fmt)


def chat_schema(body: dict) -> dict | None:
    """The schema a Chat request's `response_format` asks the content to fit (None: plain text)."""
    fmt = body.get("response_format")
    if fmt.__class__ is not dict:       # (most requests: none)
        return None
    return _schema(fmt, fmt.get("json_schema"))


def anthropic_schema(body: dict) -> dict | None:
    """The schema an Anthropic request's `output_config.format` (or the structured-outputs
    beta's top-level `output_format`) asks the text block to fit (None: plain text)."""
    config = body.get("output_config")
    fmt = (config.get("format") if isinstance(config, dict) else None) or body.get("output_format")
    return _schema(fmt, fmt)


def gemini_schema(config: dict) -> dict | None:
    """The schema a Gemini request's `generationConfig` asks the text to fit: with
    `responseMimeType: application/json`, its `responseJsonSchema` (JSON Schema) or
    `responseSchema` (Google's OpenAPI subset), else any object (None: plain text)."""
    if config.get("responseMimeType") != "application/json":
        return None
    if isinstance(config.get("responseJsonSchema"), dict):
        return config["responseJsonSchema"]
    if isinstance(config.get("responseSchema"), dict):
        return from_google(config["responseSchema"])
    return JSON_OBJECT


_SNAKE = re.compile(r"_([a-z0-9])")
# Google's Schema writes its int64 fields as JSON strings ("minItems": "1").
_INT64 = frozenset({"minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"})


def from_google(schema: Any) -> Any:
    """Google's Schema (OpenAPI 3.0's subset: types in capitals, either spelling of field names,
    int64 fields as strings, `propertyOrdering`) as JSON Schema; properties in the order
    `propertyOrdering` gives, the order Gemini writes them in."""
    if isinstance(schema, list):
        return [from_google(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        key = _SNAKE.sub(lambda m: m.group(1).upper(), key)
        if key == "type" and isinstance(value, str):
            value = value.lower()
        elif key == "properties" and isinstance(value, dict):
            value = {name: from_google(sub) for name, sub in value.items()}
        elif key in _INT64 and isinstance(value, str) and value.isdigit():
            value = int(value)
        else:
            value = from_google(value)
        out[key] = value
    order = out.get("propertyOrdering")
    if isinstance(order, list) and isinstance(out.get("properties"), dict):
        props = out["properties"]
        out["properties"] = {**{name: props[name] for name in order if name in props}, **props}
    return out


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
