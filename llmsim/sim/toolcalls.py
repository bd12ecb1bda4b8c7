"""Tool calls, the same for every API: which functions may be called, whether the model calls
them (`choose`), and the calls themselves, arguments generated from each function's
`parameters` JSON Schema by `jsonvalues`.

Chat's nested and Responses' flat function tools are read into one `ToolRequest`
(`chat_request` / `responses_request`). Invariants: every draw comes from the request's rng,
so --seed fixes the calls; a last message that is a tool result is answered in text under
`auto` (an agent loop ends); custom tools are echoed, never called. The decision table:
docs/internals.md#simtoolcalls.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import orjson

from llmsim.ids import Ids
from llmsim.errors import InvalidRequestError
from llmsim.sim import jsonvalues, textgen, tokens

MAX_PARALLEL = 3
EMPTY_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(slots=True)
class Fragment:
    text: str
    at: float


@dataclass(slots=True)
class FunctionCall:
    """One call: `call_id` pairs it with its result; `id` is the Responses item id."""
    id: str
    call_id: str
    name: str
    arguments: str
    pieces: list[str]                 # `arguments` cut into tokens
    tokens: int                       # name + arguments, exact tiktoken count
    fragments: list[Fragment] = field(default_factory=list)
    start_at: float = 0.0
    end_at: float = 0.0
    status: str = "completed"         # "incomplete" when a token cap cut the arguments
    kind: str = "function_call"


@dataclass(slots=True)       # not frozen: one per request, and frozen fields cost a setattr each
class ToolRequest:
    functions: dict[str, dict]        # name -> parameters schema, in request order
    mode: str                         # none | auto | required
    allowed: tuple[str, ...]          # the functions the choice allows
    parallel: bool


def _no_tools(body: dict) -> ToolRequest | None:
    """The request of a body with neither tools nor tool_choice (most), without the checks."""
    if body.get("tools") or body.get("tool_choice") is not None:
        return None
    return ToolRequest({}, "none", (), body.get("parallel_tool_calls") is not False)


def chat_request(body: dict) -> ToolRequest:
    if (plain := _no_tools(body)) is not None:
        return plain
    functions = {}
    for i, tool in enumerate(body.get("tools") or ()):
        if tool.get("type") == "function":
            fn = tool.get("function")
            if not isinstance(fn, dict):
                raise InvalidRequestError(f"Missing required parameter: 'tools[{i}].function'.",
                                          param=f"tools[{i}].function", code="missing_required_parameter")
            functions[fn["name"]] = fn.get("parameters")
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function":
            return _request(functions, "required", [(choice.get("function") or {}).get("name")], body)
        if kind == "allowed_tools":
            allowed = choice.get("allowed_tools") or {}
            names = [_tool_name(t) for t in allowed.get("tools") or () if t.get("type") in ("function", None)]
            return _request(functions, allowed.get("mode", "auto"), names, body)
        return _request(functions, "none", [], body)   # a custom tool: never called
    return _request(functions, choice, None, body)


def responses_request(body: dict) -> ToolRequest:
    if (plain := _no_tools(body)) is not None:
        return plain
    functions = {}
    for i, tool in enumerate(body.get("tools") or ()):
        if tool.get("type") == "function":
            if not tool.get("name"):
                raise InvalidRequestError(f"Missing required parameter: 'tools[{i}].name'.",
                                          param=f"tools[{i}].name", code="missing_required_parameter")
            functions[tool["name"]] = tool.get("parameters")
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function":
            return _request(functions, "required", [choice.get("name")], body)
        if kind == "allowed_tools":     # built-in tools listed here are builtins.py's
            names = [_tool_name(t) for t in choice.get("tools") or () if t.get("type") in ("function", None)]
            return _request(functions, choice.get("mode", "auto"), names, body)
        return _request(functions, "none", [], body)   # a built-in tool (builtins.py) or a custom one
    return _request(functions, choice, None, body)


def _tool_name(tool: dict) -> str | None:
    return tool.get("name") or (tool.get("function") or {}).get("name")


def _request(functions: dict, mode: str | None, names: list | None, body: dict) -> ToolRequest:
    mode = mode or ("auto" if functions else "none")
    if names is None:
        names = list(functions)
    for name in names:
        if name not in functions:
            raise InvalidRequestError(
                f"Invalid value for 'tool_choice': no function named '{name}' is in 'tools'.",
                param="tool_choice", code="invalid_value")
    if mode == "required" and not names and not body.get("tools"):
        raise InvalidRequestError("Invalid value for 'tool_choice': 'required' is only allowed when "
                                  "'tools' are specified.", param="tool_choice", code="invalid_value")
    return ToolRequest(functions, mode, tuple(names), body.get("parallel_tool_calls") is not False)


def choose(req: ToolRequest, rng: random.Random, probability: float, last_role: str | None) -> list[str]:
    """The functions the model calls (in order); empty: it answers in text."""
    if req.mode == "none" or not req.allowed:
        return []
    if req.mode == "auto" and (last_role == "tool" or rng.random() >= probability):
        return []
    count = 1
    if req.parallel and len(req.allowed) > 1:
        count = rng.randint(1, min(MAX_PARALLEL, len(req.allowed)))
    return rng.sample(list(req.allowed), count)


def make_calls(names: list[str], req: ToolRequest, rng: random.Random, encoding: str, ids: Ids) -> list[FunctionCall]:
    """One call per name, its arguments generated from the function's parameters schema."""
    calls = []
    for name in names:
        schema = req.functions.get(name) or EMPTY_PARAMETERS
        if "type" not in schema:
            schema = {"type": "object", **schema}
        value = jsonvalues.value(schema, rng)
        arguments = dumps(value if isinstance(value, dict) else {})
        calls.append(FunctionCall(ids.make("function_call", rng), ids.make("call", rng), name, arguments,
                                  textgen.split(arguments, encoding),
                                  tokens.count(name, encoding) + tokens.count(arguments, encoding)))
    return calls


def scripted(calls: Any, rng: random.Random, encoding: str, ids: Ids) -> list[FunctionCall]:
    """Calls given in full: (name, arguments JSON text) pairs (a scenario's)."""
    return [FunctionCall(ids.make("function_call", rng), ids.make("call", rng), name, arguments,
                         textgen.split(arguments, encoding),
                         tokens.count(name, encoding) + tokens.count(arguments, encoding))
            for name, arguments in calls]


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:   # an integer beyond 64 bits, asked for by the schema's bounds
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def fit(calls: list[FunctionCall], budget: int, encoding: str) -> list[FunctionCall]:
    """The calls within `budget` tokens: the one that overflows is cut short (status
    "incomplete", arguments no longer valid JSON, as a model cut off mid-call) and later ones dropped."""
    kept = []
    for call in calls:
        if call.tokens <= budget:
            budget -= call.tokens
            kept.append(call)
            continue
        name_tokens = tokens.count(call.name, encoding)
        call.pieces = call.pieces[:max(0, budget - name_tokens)]
        call.arguments = "".join(call.pieces)
        call.tokens = min(budget, name_tokens + tokens.count(call.arguments, encoding))
        call.status = "incomplete"
        kept.append(call)
        break
    return kept


def units(calls: list[FunctionCall]) -> int:
    """How many timed steps the calls take (one per argument token, at least one per call)."""
    return sum(max(1, len(call.pieces)) for call in calls)


def place(calls: list[FunctionCall], times: Any, start: float) -> None:
    """Give each call and argument fragment its due time, from `times` (one per unit)."""
    times = list(times)
    i = 0
    last = start
    for call in calls:
        n = max(1, len(call.pieces))
        slots = times[i:i + n] or [last]
        i += n
        call.start_at = slots[0]
        call.fragments = [Fragment(p, t) for p, t in zip(call.pieces, slots)]
        call.end_at = last = slots[-1]


def halve(calls: list[FunctionCall]) -> int:
    """The last call's arguments cut in half (status incomplete, as a fault's truncated
    output leaves them); the output tokens the calls have left."""
    call = calls[-1]
    keep = len(call.pieces) // 2
    call.tokens -= len(call.pieces) - keep
    call.pieces = call.pieces[:keep]
    call.fragments = call.fragments[:keep]
    call.arguments = "".join(call.pieces)
    call.status = "incomplete"
    if call.fragments:
        call.end_at = call.fragments[-1].at
    return sum(c.tokens for c in calls)


def truncated(calls: list[FunctionCall]) -> bool:
    return any(call.status == "incomplete" for call in calls)
