"""schemathesis hooks for tests/schemathesis_live.sh (loaded through SCHEMATHESIS_HOOKS).

A schema-valid request is expected to be accepted. A few rules between fields (or between
requests: a page cursor names an item an earlier listing returned) cannot be written in an
OpenAPI 3.0 schema; each is a documented 400 tested elsewhere. Here generated
*valid* (positive) requests are adjusted to obey them, so that "valid requests are accepted"
stays a meaningful check. Invalid (negative) requests are sent untouched, except one whose
only fault is an explicit `null` for an optional field: the server takes that as absent, as
the providers do (llmsim.api.validation.check), so it is not generated as invalid.
"""
from __future__ import annotations

import copy

import schemathesis
from connexion.json_schema import resolve_refs

from llmsim.api import validation
from llmsim.errors import InvalidRequestError
from llmsim.faults.kinds import load_kinds
from llmsim.sim.builtins import TYPES as BUILT_IN_TOOLS

# A model's output limit is per model (llmsim/data/models.yaml); the catalogue's smallest.
MODEL_OUTPUT_LIMIT = 16384
OUTPUT_CAPS = ("max_output_tokens", "max_tokens", "max_completion_tokens")
EMBEDDING_SIZE = 1536       # an embedding model's vector size (any model's, --allow-any-model)
# The efforts of the catalogue's first model (gpt-5), which counts input tokens for a request naming none.
DEFAULT_MODEL_EFFORTS = ("minimal", "low", "medium", "high", None)
GEMINI_CONFIGS, GEMINI_CAPS = ("generationConfig", "generation_config"), ("maxOutputTokens", "max_output_tokens")


# Fault kinds are the catalogue's (llmsim/data/faults.yaml, or a --data DIR's): data the document
# cannot list, so /llmsim/faults and PATCH /llmsim/config bodies name the packaged ones.
KINDS = tuple(load_kinds())
CURSORS = ("after", "before")


def obey_rules_the_document_cannot_state(body: dict) -> None:
    name_known_fault_kinds(body)
    for cap in OUTPUT_CAPS:
        if isinstance(body.get(cap), int) and not isinstance(body.get(cap), bool):
            body[cap] = min(body[cap], MODEL_OUTPUT_LIMIT)
    for name in GEMINI_CONFIGS:                             # Gemini: generationConfig's cap
        config = body.get(name)
        for cap in GEMINI_CAPS:
            if isinstance(config, dict) and isinstance(config.get(cap), int) and not isinstance(config[cap], bool):
                config[cap] = min(config[cap], MODEL_OUTPUT_LIMIT)
    if body.get("previous_response_id") is not None:      # no stored response to continue: 400
        body.pop("previous_response_id")                   # previous_response_not_found, as OpenAI
    tool_choice_names_offered_tools(body)
    reasoning = body.get("reasoning")
    if body.get("model") is None and isinstance(reasoning, dict) and reasoning.get("effort") not in DEFAULT_MODEL_EFFORTS:
        reasoning.pop("effort")
    if isinstance(body.get("dimensions"), int):             # at most the embedding model's size
        body["dimensions"] = min(body["dimensions"], EMBEDDING_SIZE)
    for request in [body, *(body.get("requests") if isinstance(body.get("requests"), list) else ())]:
        for name in ("outputDimensionality", "output_dimensionality"):      # Gemini's, likewise
            if isinstance(request, dict) and isinstance(request.get(name), int) and not isinstance(request[name], bool):
                request[name] = min(request[name], EMBEDDING_SIZE)
    if isinstance(body.get("profile"), str):                 # PATCH /llmsim/config: a profile of the data
        body["profile"] = "instant"
    obey_anthropics_rules(body)
    gemini_allowed_functions_are_declared(body)


def tool_choice_names_offered_tools(body: dict) -> None:
    """OpenAI: a function tool has a name; a tool_choice naming a function, a built-in tool (by its family: web_search_preview
    answers for web_search) or a list of allowed tools names only tools the request offers, and
    `required` needs tools. Anthropic's and Gemini's own rules are below."""
    choice, tools = body.get("tool_choice"), [t for t in body.get("tools") or () if isinstance(t, dict)]
    for i, tool in enumerate(tools):                # one Tool object for every kind: a function's
        if tool.get("type") == "function" and not tool.get("name"):     # name is the handler's check
            tool["name"] = f"f{i}"
    functions = {_function_name(tool) for tool in tools if tool.get("type") == "function"} - {None}
    families = {_family(tool.get("type")) for tool in tools}
    if choice == "required" and not tools:
        body["tool_choice"] = "auto"
    if not isinstance(choice, dict):
        return
    kind = choice.get("type")
    if kind == "function":
        if _function_name(choice) not in functions:
            body["tool_choice"] = "auto"
    elif kind in BUILT_IN_TOOLS:
        labels = {tool.get("server_label") for tool in tools if tool.get("type") == "mcp"}
        if _family(kind) not in families or (kind == "mcp" and choice.get("server_label") not in labels | {None}):
            body["tool_choice"] = "auto"
    elif kind == "allowed_tools":
        allowed = choice if "tools" in choice else choice.get("allowed_tools")   # Responses' shape, Chat's
        listed = allowed.get("tools") if isinstance(allowed, dict) else None
        listed = [t for t in listed or () if isinstance(t, dict)]
        unknown = any(_function_name(t) not in functions for t in listed if t.get("type") in ("function", None))
        if unknown or not tools:
            body["tool_choice"] = "auto"


def _function_name(tool: dict) -> str | None:
    """A function's name in Responses' flat shape or Chat's nested one."""
    function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return function.get("name")


def _family(kind) -> str | None:
    return "web_search" if isinstance(kind, str) and kind.startswith("web_search") else kind


def name_known_fault_kinds(body: dict) -> None:
    if isinstance(body.get("errors"), dict):
        body["errors"] = {kind if kind in KINDS else KINDS[i % len(KINDS)]: rate
                          for i, (kind, rate) in enumerate(body["errors"].items())}
    for entry in body.get("schedule") if isinstance(body.get("schedule"), list) else ():
        if isinstance(entry, dict) and entry.get("kind") not in KINDS:
            entry["kind"] = KINDS[0]


def obey_anthropics_rules(body: dict) -> None:
    """openapi/anthropic.yaml: a thinking budget below max_tokens; a named tool among the tools;
    no `thread` (message threads are answered thread_unsupported_request, a documented 400)."""
    if isinstance(body.get("messages"), list):
        body.pop("thread", None)
    thinking, cap = body.get("thinking"), body.get("max_tokens")
    if isinstance(thinking, dict) and isinstance(thinking.get("budget_tokens"), int) and isinstance(cap, int):
        if thinking["budget_tokens"] >= cap:
            body["max_tokens"] = min(MODEL_OUTPUT_LIMIT, thinking["budget_tokens"] + 1)
            thinking["budget_tokens"] = min(thinking["budget_tokens"], body["max_tokens"] - 1)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool":
        named = {tool.get("name") for tool in body.get("tools") or () if isinstance(tool, dict)
                 and tool.get("type") in (None, "custom")}
        if choice.get("name") not in named - {None}:
            body["tool_choice"] = {"type": "auto"}


def gemini_allowed_functions_are_declared(body: dict) -> None:
    """Gemini: allowedFunctionNames may name only declared functions (either spelling of each field)."""
    declared = {fn.get("name") for tool in body.get("tools") or () if isinstance(tool, dict)
                for key in ("functionDeclarations", "function_declarations")
                for fn in tool.get(key) or () if isinstance(fn, dict)}
    for config_key in ("toolConfig", "tool_config"):
        config = body.get(config_key)
        for calling_key in ("functionCallingConfig", "function_calling_config"):
            calling = config.get(calling_key) if isinstance(config, dict) else None
            for names_key in ("allowedFunctionNames", "allowed_function_names"):
                if isinstance(calling, dict) and isinstance(calling.get(names_key), list):
                    calling[names_key] = [name for name in calling[names_key] if name in declared]


_VALIDATORS: dict = {}


def body_validator(operation):
    """The request validator the server compiles for `operation`'s JSON body (None: no body)."""
    key = (id(operation.schema.raw_schema), operation.method.lower(), operation.path)
    if key not in _VALIDATORS:
        resolved = _VALIDATORS.setdefault(id(operation.schema.raw_schema), resolve_refs(operation.schema.raw_schema))
        op = resolved["paths"].get(operation.path, {}).get(operation.method.lower(), {})
        schema = ((op.get("requestBody") or {}).get("content") or {}).get("application/json", {}).get("schema")
        _VALIDATORS[key] = validation.compile_schema(schema) if schema else None
    return _VALIDATORS[key]


@schemathesis.hook
def filter_case(context, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_negative or not isinstance(case.body, dict):
        return True
    validator = body_validator(case.operation)
    try:
        return validator is None or not validation.check(validator, copy.deepcopy(case.body))
    except InvalidRequestError:
        return True


@schemathesis.hook
def before_call(context, case, kwargs):
    meta = case.meta
    if meta is not None and meta.generation.mode.is_negative:
        return
    if isinstance(case.body, dict):
        obey_rules_the_document_cannot_state(case.body)
    if isinstance(case.query, dict):                        # a page cursor comes from a listing
        for cursor in CURSORS:
            case.query.pop(cursor, None)
