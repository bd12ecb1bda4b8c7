"""Plan one Gemini generateContent answer: candidates of text, thoughts or function calls.

The request is read in camelCase (`camel_case` turns Google's snake_case spelling into it)
and shares the planning core of the OpenAI APIs (inputs, textgen, latency, reasoning rules,
toolcalls, llmsim.sim.steps). Invariants: thoughts spend `maxOutputTokens` first, as Gemini
counts them in it; function calls come whole, never cut; candidates are chat_plan.Choice
objects, so faults and stats treat them as Chat's choices. Gemini's own thinking, structured
output and calls: docs/internals.md#simgemini_plan.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NamedTuple

import orjson

from llmsim.errors import InvalidRequestError
from llmsim.sim import inputs, latency, steps, structured, textgen, toolcalls
from llmsim.sim.chat_plan import Choice
from llmsim.sim.responses_plan import Context, Usage
from llmsim.sim.scenarios import Answer

# Values whose keys are the client's own (function arguments and results, JSON Schemas): kept
# as sent when a request is turned into camelCase.
OPAQUE = frozenset({"args", "response", "parameters", "parametersJsonSchema", "responseSchema",
                    "responseJsonSchema"})
ROLES = {"user": "user", "model": "assistant", "function": "tool"}
MODES = {"AUTO": "auto", "MODE_UNSPECIFIED": "auto", "VALIDATED": "auto", "ANY": "required", "NONE": "none"}
RESPONSE_ID = "gemini_response"   # its id format (ids.yaml; a --data file without it: item's)
THOUGHT_SUMMARY = "auto"        # the size of a thought summary (reasoning.yaml summary_fraction)
_SNAKE = re.compile(r"_([a-z0-9])")


def camel_case(value: Any) -> Any:
    """A request with every field name in camelCase (`generation_config` -> `generationConfig`)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            name = _SNAKE.sub(lambda m: m.group(1).upper(), key)
            out[name] = item if name in OPAQUE else camel_case(item)
        return out
    if isinstance(value, list):
        return [camel_case(item) for item in value]
    return value


class Call(NamedTuple):
    """A function call as a part sends it: `args` an object, due at `at`."""
    id: str
    name: str
    args: dict
    at: float


class Part(NamedTuple):
    kind: str                           # thought | text | call
    text: str = ""
    call: Call | None = None


@dataclass(slots=True)
class Candidate(Choice):
    calls: list[Call] = field(default_factory=list)
    thoughts: tuple[str, ...] = ()      # the thought summary, one piece per word
    thought_times: tuple[float, ...] = ()

    @property
    def parts(self) -> list[Part]:
        """The candidate's content as one answer sends it: thoughts, text, calls."""
        parts = [Part("thought", "".join(self.thoughts))] if self.thoughts else []
        if self.text:
            parts.append(Part("text", self.text))
        return parts + [Part("call", call=call) for call in self.calls]


@dataclass(slots=True)
class GeminiPlan(steps.Choices):     # (the Plan protocol: finishReason SAFETY / MAX_TOKENS)
    id: str
    created: int
    model: str
    req: dict[str, Any]
    choices: list[Candidate]
    usage: Usage
    first_token_at: float
    end_at: float
    effort: str | None

    @property
    def chunks(self) -> list[tuple]:
        """The stream: (kind, candidate, at, text, call) per chunk, every candidate's merged by time."""
        out = []
        for c in self.choices:
            out += [("thought", c, at, text, None) for text, at in zip(c.thoughts, c.thought_times)]
            out += [("text", c, at, text, None) for text, at in zip(c.pieces, c.times)]
            out += [("call", c, call.at, "", call) for call in c.calls]
            out.append(("finish", c, c.end_at, "", None))
        if len(self.choices) > 1:
            out.sort(key=itemgetter(2))
        return out

    def replan_chunks(self) -> None:
        """The candidates changed (a content filter cut them): `chunks` reads them anew anyway."""


def turns(req: dict) -> list[inputs.Turn]:
    """The conversation as llmsim counts it: the system instruction, then each content."""
    out = []
    if req.get("systemInstruction"):
        out.append(_turn(req["systemInstruction"], "system", "systemInstruction"))
    for i, content in enumerate(req.get("contents") or ()):
        out.append(_turn(content, ROLES[content.get("role") or "user"], f"contents[{i}]"))
    return out


def _turn(content: dict, role: str, path: str) -> inputs.Turn:
    turn = inputs.Turn(role, path=path)
    for j, part in enumerate(content.get("parts") or ()):
        if part.get("text") is not None:
            turn.texts.append(part["text"])
        elif call := part.get("functionCall"):
            turn.texts += [call.get("name", ""), _json(call.get("args") or {})]
            turn.calls += ((call.get("id") or call.get("name"), call.get("name")),)
        elif result := part.get("functionResponse"):
            turn.role = "tool"          # a function's result: the model answers it in text
            turn.texts += [result.get("name", ""), _json(result.get("response") or {})]
            turn.call_id = result.get("id") or result.get("name")   # (ids are optional: else its name)
        elif (blob := part.get("inlineData") or part.get("fileData")) and \
                str(blob.get("mimeType", "")).startswith("image/"):
            turn.images += 1
            turn.path = f"{path}.parts[{j}]"
    return turn


def _args(arguments: str) -> Any:
    """A call's arguments as the part sends them: the object, or (a script's text that is no
    JSON object: a malformed_tool_arguments fault's) the text under `_raw`."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:   # an integer beyond 64 bits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def count_tokens(req: dict, ctx: Context) -> GeminiPlan:
    """countTokens: the prompt's tokens, as generateContent counts them (a plan with no answer)."""
    inner = req.get("generateContentRequest") or req
    prompt = inputs.count(turns(inner), ctx.model.encoding)
    return GeminiPlan("", ctx.created_at, ctx.model.id, req, [], Usage(prompt, 0, 0, prompt), 0.0, 0.0, None)


def tool_request(req: dict) -> toolcalls.ToolRequest | None:
    functions = {}
    for tool in req.get("tools") or ():
        for fn in tool.get("functionDeclarations") or ():
            functions[fn["name"]] = _lower_types(fn.get("parametersJsonSchema") or fn.get("parameters")
                                                 or toolcalls.EMPTY_PARAMETERS)
    if not functions:
        return None
    config = (req.get("toolConfig") or {}).get("functionCallingConfig") or {}
    mode = MODES[config.get("mode") or "AUTO"]
    names = config.get("allowedFunctionNames") or list(functions)
    for name in names:
        if name not in functions:
            raise InvalidRequestError(
                f"Invalid value for 'toolConfig.functionCallingConfig.allowedFunctionNames': no function "
                f"named '{name}' is declared in 'tools'.", param="toolConfig", code="invalid_value")
    return toolcalls.ToolRequest(functions, mode, tuple(names), True)


def _lower_types(schema: Any) -> Any:
    """Google's Schema names types in capitals (`OBJECT`); JSON Schema in lower case."""
    if isinstance(schema, dict):
        return {k: (v.lower() if k == "type" and isinstance(v, str) else _lower_types(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def thinking_effort(ctx: Context, thinking: dict) -> str | None:
    """The reasoning effort: `thinkingLevel`, else the model's default; none with a budget of 0."""
    model = ctx.model
    if not model.reasons or (thinking.get("thinkingBudget") == 0 and not thinking.get("thinkingLevel")):
        return None
    level = thinking.get("thinkingLevel")
    level = level.lower() if level and level != "THINKING_LEVEL_UNSPECIFIED" else None
    return ctx.rules.effort(model, level, "generationConfig.thinkingConfig.thinkingLevel", ctx.settings.compat)


def plan_generate(req: dict, ctx: Context, history: list[inputs.Turn] | None = None,
                  script: Answer | None = None) -> GeminiPlan:
    """Plan a generateContent answer of `candidateCount` candidates (`req` in camelCase).

    `history`: turns said before the request's contents (counted as input); `script`
    (scenarios.Answer): what every candidate says instead: a text part, functionCall parts,
    or a refusal (its text, finishReason SAFETY)."""
    model = ctx.model
    conversation = turns(req)
    if history:
        conversation = [*history, *conversation]
    if not model.vision:
        inputs.check_vision(conversation, model)
    prompt = inputs.count(conversation, model.encoding)
    config = req.get("generationConfig") or {}
    cap = config.get("maxOutputTokens")
    if prompt > model.context_window or cap is not None:
        steps.check_context(ctx, prompt, cap, "generationConfig.maxOutputTokens")
    thinking = config.get("thinkingConfig") or {}
    effort = thinking_effort(ctx, thinking)
    tool_req = tool_request(req)
    last_role = conversation[-1].role if conversation else None
    stops = [s for s in config.get("stopSequences") or () if s]
    schema = structured.gemini_schema(config)
    candidates, first_token = [], None
    for index in range(config.get("candidateCount") or 1):
        candidate, first = _candidate(index, ctx, conversation, cap, effort, thinking, tool_req, last_role, stops,
                                      script, schema)
        first_token = first if first_token is None else min(first_token, first)
        candidates.append(candidate)
    visible = sum(c.visible_tokens for c in candidates)
    reasoning = sum(c.reasoning_tokens for c in candidates)
    usage = Usage.make(prompt, visible, reasoning, ctx.settings.usage)
    return GeminiPlan(ctx.ids.make(RESPONSE_ID if RESPONSE_ID in ctx.ids.formats else "item", ctx.rng), ctx.created_at, model.id, req, candidates,
                      usage, first_token, max(c.end_at for c in candidates), effort)


def _candidate(index: int, ctx: Context, conversation: list, cap: int | None, effort: str | None,
               thinking: dict, tool_req: toolcalls.ToolRequest | None, last_role: str | None,
               stops: list[str], script: Answer | None = None,
               schema: dict | None = None) -> tuple[Candidate, float]:
    """One candidate and its time to first token: the answer first, then the thinking that led to it."""
    rng, enc = ctx.rng, ctx.model.encoding
    names, calls, text = steps.said(ctx, tool_req, last_role, conversation, schema, script)
    if names:
        wanted = sum(c.tokens for c in calls)
    else:
        if stops:
            text = steps.stop(text, stops, enc)
        wanted = text.tokens
    reasoning = ctx.rules.tokens(effort, wanted) if effort is not None else 0
    budget = thinking.get("thinkingBudget")
    if budget is not None and budget > 0:
        reasoning = min(reasoning, budget)
    reasoning, room = steps.within_cap(reasoning, cap, True)     # thoughts spend maxOutputTokens first
    truncated = False
    if names:
        if room is not None and wanted > room:      # whole calls only
            calls = [c for c in toolcalls.fit(calls, room, enc) if c.status == "completed"]
            truncated = True
        units = toolcalls.units(calls)
    else:
        if room is not None and text.tokens > room:
            text = steps.cut_text(text, room, enc)
        truncated = text.truncated
        units = len(text.pieces)
    sched = latency.schedule(ctx.profile, rng, reasoning, units)
    first_at = sched.token_times[0] if sched.token_times else sched.reasoning_end
    finish = "length" if truncated else ("content_filter" if script is not None and script.refusal else "stop")
    if names:
        toolcalls.place(calls, sched.token_times, first_at)
        candidate = Candidate(index, None, (), (), calls, finish, first_at, sched.end,
                              sum(c.tokens for c in calls), reasoning,
                              calls=[Call(c.call_id, c.name, _args(c.arguments), c.end_at) for c in calls])
    else:
        candidate = Candidate(index, text.text, text.pieces, sched.token_times, [], finish, first_at,
                              sched.end, text.tokens, reasoning)
    words = ctx.rules.summary_words(THOUGHT_SUMMARY, reasoning) if thinking.get("includeThoughts") else 0
    if words:
        summary = textgen.words_text(words, rng).split(" ")
        candidate.thoughts = tuple(w if i == 0 else " " + w for i, w in enumerate(summary))
        candidate.thought_times = tuple(latency.spread(sched.first_token, sched.reasoning_end, len(summary)))
    return candidate, sched.first_token
