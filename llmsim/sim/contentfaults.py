"""Content faults: the model's own mistakes, as the answer a request gets instead of its own
(scripted or generated). Triggered like every fault (llmsim.faults); `truncated_output`
cuts the planned answer instead (llmsim.faults.injection).

- refusal: a refusal (the fault kind's message is its text);
- empty_output: an empty text;
- unknown_tool_call: a call to a function the request did not offer;
- malformed_tool_arguments: calls whose arguments are not valid JSON;
- schema_violating_tool_arguments: valid JSON arguments that break the function's schema.
"""
from __future__ import annotations

import random
from typing import Any, Mapping

import orjson

from llmsim.sim import anthropic_plan, gemini_plan, jsonvalues, toolcalls
from llmsim.sim.scenarios import Answer

ANSWERS = ("refusal", "empty_output", "unknown_tool_call", "malformed_tool_arguments",
           "schema_violating_tool_arguments")
UNKNOWN_TOOL = "lookup_record"       # what an unknown call calls (with a suffix if it is offered)


def spoiled(effect: str, answer: Answer | None, body: Mapping[str, Any], api: str,
            rng: random.Random, message: str) -> Answer | None:
    """The answer `effect` gives instead of `answer` (None: what would be generated)."""
    if effect == "refusal":
        return Answer(text=message, refusal=True)
    if effect == "empty_output":
        return Answer(text="")
    if effect not in ANSWERS:
        return answer
    functions = offered(body, api)
    if effect == "unknown_tool_call":
        name = UNKNOWN_TOOL
        while name in functions:
            name += "_v2"
        return Answer(calls=((name, _dumps({"id": f"rec_{rng.randrange(1000, 10000)}"})),))
    calls = answer.calls if answer is not None and answer.calls else None
    if calls is None:           # a call to one of the offered functions (or an invented one)
        name = rng.choice(list(functions)) if functions else UNKNOWN_TOOL
        calls = ((name, _dumps(_valid(functions.get(name), rng))),)
    if effect == "malformed_tool_arguments":
        return Answer(calls=tuple((name, _malformed(arguments)) for name, arguments in calls))
    return Answer(calls=tuple((name, _dumps(_violating(functions.get(name), _loads(arguments), rng)))
                              for name, arguments in calls))


def offered(body: Mapping[str, Any], api: str) -> dict:
    """The functions a request offers (name -> parameters schema), read in its API's shape."""
    if api == "chat":
        return toolcalls.chat_request(body).functions
    if api == "anthropic":
        return anthropic_plan.tool_request(body).functions
    if api == "gemini":
        found = gemini_plan.tool_request(body)
        return found.functions if found is not None else {}
    return toolcalls.responses_request(body).functions


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _loads(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}


def _schema(schema: Mapping | None) -> dict:
    schema = dict(schema or toolcalls.EMPTY_PARAMETERS)
    schema.setdefault("type", "object")
    return schema


def _valid(schema: Mapping | None, rng: random.Random) -> Any:
    value = jsonvalues.value(_schema(schema), rng)
    return value if isinstance(value, dict) else {}


def _malformed(arguments: str) -> str:
    """The arguments without their last character (an object's closing brace): never JSON."""
    broken = arguments[:-1]
    try:
        orjson.loads(broken)
    except orjson.JSONDecodeError:
        return broken
    return broken + ","


WRONG = {"string": 12345, "integer": "twelve", "number": "twelve", "boolean": "yes", "array": "none",
         "object": "none", "null": "none"}


def _violating(schema: Mapping | None, value: Any, rng: random.Random) -> Any:
    """`value` (valid for `schema`) changed so that it is not: a required property left out,
    else a property of the wrong type, else not an object at all."""
    schema = _schema(schema)
    if not isinstance(value, dict):
        value = _valid(schema, rng)
    required = [name for name in schema.get("required") or () if name in value]
    if required:
        return {k: v for k, v in value.items() if k != required[0]}
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if isinstance(kind, str) and kind in WRONG:
            return {**value, name: WRONG[kind]}
    return [value]
