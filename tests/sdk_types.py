"""Check JSON that llmsim sends against the official SDKs' own types (`openai.types`,
`anthropic.types`, `google.genai.types`): it must parse into the SDK's model, and every key
must be a field the SDK declares, unless openapi/departures.yaml lists it under
`sdk_unknown`. Fields the SDK declares that llmsim never sends are collected (`missing()`).
Why and how: docs/internals.md#testssdk_types.

Public API: :func:`check`, :func:`check_event`, :func:`missing`, :func:`unknown`,
:func:`report`, :func:`isolated`, :data:`KINDS`. With SDK_DRIFT_REPORT=1 the test run ends
with :func:`report` (tests/conftest.py).
"""
from __future__ import annotations

import contextlib
import copy
import importlib
import threading
import typing
from typing import Any, Iterator

import pydantic
import typing_extensions
from openai.types.shared import ErrorObject

import oai_schemas

# OpenAI schema name (as tests pass it to oai_schemas) -> "module:attribute" of the SDK type.
KINDS = {
    "Response": "openai.types.responses:Response",
    "ResponseStreamEvent": "openai.types.responses:ResponseStreamEvent",
    "ResponseWsError": "openai.types.responses.responses_server_event:ResponseWsError",
    "ResponseItemList": "openai.types.responses:ResponseItemList",
    "TokenCountsResource": "openai.types.responses:InputTokenCountResponse",
    "CreateChatCompletionResponse": "openai.types.chat:ChatCompletion",
    "CreateChatCompletionStreamResponse": "openai.types.chat:ChatCompletionChunk",
    "Model": "openai.types:Model",
    "ConversationResource": "openai.types.conversations:Conversation",
    "ConversationItem": "openai.types.conversations:ConversationItem",
    "ConversationItemList": "openai.types.conversations:ConversationItemList",
    "DeletedConversationResource": "openai.types.conversations:ConversationDeletedResource",
    "ErrorResponse": "sdk_types:ErrorEnvelope",
    "WebhookResponseCompleted": "openai.types.webhooks:ResponseCompletedWebhookEvent",
    "WebhookResponseFailed": "openai.types.webhooks:ResponseFailedWebhookEvent",
    "WebhookResponseCancelled": "openai.types.webhooks:ResponseCancelledWebhookEvent",
    "WebhookResponseIncomplete": "openai.types.webhooks:ResponseIncompleteWebhookEvent",
    # more of OpenAI (issue 51). Not CompactResource: the SDK types its output as output items only,
    # which the document's own example (kept user messages) does not parse as.
    "CreateEmbeddingResponse": "openai.types:CreateEmbeddingResponse",
    "CreateCompletionResponse": "openai.types:Completion",
    "CreateModerationResponse": "openai.types:ModerationCreateResponse",
    "ChatCompletionDeleted": "openai.types.chat:ChatCompletionDeleted",
    # Anthropic Messages (openapi/anthropic.yaml) and Gemini (openapi/gemini.yaml), by their SDKs
    "anthropic.Message": "anthropic.types:Message",
    "anthropic.MessageStreamEvent": "anthropic.types:RawMessageStreamEvent",
    "anthropic.MessageTokensCount": "anthropic.types:MessageTokensCount",
    "anthropic.ModelInfo": "anthropic.types:ModelInfo",
    "anthropic.ErrorResponse": "anthropic.types:ErrorResponse",
    "gemini.GenerateContentResponse": "google.genai.types:GenerateContentResponse",
    "gemini.CountTokensResponse": "google.genai.types:CountTokensResponse",
    "gemini.EmbedContentResponse": "google.genai.types:EmbedContentResponse",
}

_lock = threading.Lock()
_types: dict[str, Any] = {}
# (module, qualname) of a model -> (model class, fields seen in any JSON parsed into it)
_seen: dict[tuple[str, str], tuple[type, set[str]]] = {}
# (model name, field) -> a JSON path where it was sent (unknown to the SDK)
_unknown: dict[tuple[str, str], str] = {}


class ErrorEnvelope(pydantic.BaseModel):
    """HTTP error body `{"error": ErrorObject}`: the SDK has the inner object only
    (`openai.types.shared.ErrorObject`), and reads the envelope by hand."""

    model_config = pydantic.ConfigDict(extra="allow")
    error: ErrorObject


def sdk_type(kind: str) -> Any:
    """The SDK type (a pydantic model class or a union) for an OpenAI schema name."""
    tp = _types.get(kind)
    if tp is None:
        module, _, attr = KINDS[kind].partition(":")
        tp = getattr(importlib.import_module(module), attr)
        _types[kind] = tp
    return tp


def check(kind: str, data: Any) -> None:
    """Parse `data` into the SDK type for OpenAI schema `kind`; raise AssertionError if it does
    not parse or carries a field the SDK does not declare (and no departure excuses).
    Kinds without an SDK type (see KINDS) are skipped."""
    if kind not in KINDS:
        return
    normalized = data if "." in kind else oai_schemas._normalize(data)[0]
    model = _pick(sdk_type(kind), normalized, kind)
    try:
        parsed = model.model_validate(normalized)
    except pydantic.ValidationError as exc:
        # A type that forbids extra keys (google-genai's): parse without them; the walk below
        # reports each as unknown to the SDK.
        if not all(error["type"] == "extra_forbidden" for error in exc.errors()):
            raise AssertionError(f"does not parse as the SDK's {_name(model)} ({KINDS[kind]}): {exc}") from None
        parsed = model.model_validate(_without(normalized, [error["loc"] for error in exc.errors()]))
    found: list[tuple[str, str, str]] = []
    with _lock:
        _walk(parsed, normalized, "$", found)
    bad = [(m, f, p) for m, f, p in found if f"{m}.{f}" not in excused()]
    if bad:
        lines = [f"  {p}: {m}.{f}" for m, f, p in bad[:10]]
        raise AssertionError(f"{kind}: field(s) unknown to openai.types (openai "
                             f"{_sdk_version()}; excuse in openapi/departures.yaml `sdk_unknown`):\n"
                             + "\n".join(lines))


def check_event(event: dict) -> None:
    """A Responses stream event, by its `type`, against the SDK's ResponseStreamEvent union."""
    check("ResponseStreamEvent", event)


def excused() -> set[str]:
    """`Model.field` names that departures list under `sdk_unknown`."""
    return {name for entry in oai_schemas.departures() for name in entry.get("sdk_unknown") or ()}


def missing() -> dict[str, list[str]]:
    """Model name -> fields the SDK declares that no JSON checked so far has carried."""
    with _lock:
        items = list(_seen.values())
    names = _display_names([cls for cls, _ in items])
    out = {}
    for cls, seen in items:
        fields = sorted(_wire_names(cls) - seen)
        if fields:
            out[names[cls]] = fields
    return dict(sorted(out.items()))


def unknown() -> dict[str, str]:
    """`Model.field` -> a JSON path where llmsim sent a field the SDK does not declare
    (excused ones included; see :func:`excused`)."""
    with _lock:
        return {f"{m}.{f}": p for (m, f), p in sorted(_unknown.items())}


def report() -> str:
    """The collected drift as text: fields never sent per model, then unknown fields."""
    lines = [f"openai {_sdk_version()}: fields the SDK declares that llmsim never sent"]
    for name, fields in missing().items():
        lines.append(f"  {name}: {', '.join(fields)}")
    found = unknown()
    lines.append("fields llmsim sent that the SDK does not declare" + ("" if found else ": none"))
    excuses = excused()
    for name, path in found.items():
        lines.append(f"  {name} (at {path})" + ("  [excused by departures.yaml]" if name in excuses
                                                else "  [NOT EXCUSED]"))
    return "\n".join(lines)


def reset() -> None:
    """Forget what has been collected (for a fresh report)."""
    with _lock:
        _seen.clear()
        _unknown.clear()


@contextlib.contextmanager
def isolated(keep: bool = True) -> Iterator[None]:
    """Collect into fresh tables inside the block (for a report of just its calls); what it
    collected is added to the process-wide tables afterwards, unless `keep` is false."""
    global _seen, _unknown
    with _lock:
        outer = (_seen, _unknown)
        _seen, _unknown = {}, {}
    try:
        yield
    finally:
        with _lock:
            inner = (_seen, _unknown) if keep else ({}, {})
            _seen, _unknown = outer
            for key, (cls, fields) in inner[0].items():
                _seen.setdefault(key, (cls, set()))[1].update(fields)
            for key, path in inner[1].items():
                _unknown.setdefault(key, path)


# --------------------------------------------------------------------------


def _sdk_version() -> str:
    import anthropic
    import openai
    from google import genai
    return f"{openai.__version__}, anthropic {anthropic.__version__}, google-genai {genai.__version__}"


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _wire_names(cls: type) -> set[str]:
    return {info.alias or name for name, info in cls.model_fields.items()}


def _display_names(classes: list[type]) -> dict[type, str]:
    """Class -> its name, qualified by its module's last part when two classes share it."""
    counts: dict[str, int] = {}
    for cls in classes:
        counts[cls.__qualname__] = counts.get(cls.__qualname__, 0) + 1
    return {cls: cls.__qualname__ if counts[cls.__qualname__] == 1
            else f"{cls.__qualname__} ({cls.__module__.rsplit('.', 1)[-1]})" for cls in classes}


def _union_members(tp: Any) -> list[Any] | None:
    if typing.get_origin(tp) is typing_extensions.Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) is typing.Union:
        return list(typing.get_args(tp))
    return None


def _pick(tp: Any, data: Any, kind: str) -> type:
    """The model class of `tp` for `data`: `tp` itself, or the union member whose `type`
    literal holds data["type"]."""
    members = _union_members(tp)
    if members is None:
        return tp
    value = data.get("type") if isinstance(data, dict) else None
    for member in members:
        field = getattr(member, "model_fields", {}).get("type")
        if field is not None and value in typing.get_args(field.annotation):
            return member
    raise AssertionError(f"{kind}: type {value!r} is no member of the SDK's union "
                         f"({KINDS[kind]}, openai {_sdk_version()})")


def _without(data: Any, locations: list) -> Any:
    """A copy of `data` without the keys at `locations` (pydantic error locations)."""
    data = copy.deepcopy(data)
    for loc in locations:
        node = data
        for part in loc[:-1]:
            node = node[part]
        node.pop(loc[-1], None)
    return data


def _walk(obj: Any, raw: Any, path: str, found: list) -> None:
    if isinstance(obj, pydantic.BaseModel) and isinstance(raw, dict):
        cls = type(obj)
        by_wire = {info.alias or name: name for name, info in cls.model_fields.items()}
        entry = _seen.setdefault((cls.__module__, cls.__qualname__), (cls, set()))
        for key, value in raw.items():
            name = by_wire.get(key)
            if name is None:
                found.append((cls.__qualname__, key, f"{path}.{key}"))
                _unknown.setdefault((cls.__qualname__, key), f"{path}.{key}")
                continue
            entry[1].add(key)
            _walk(getattr(obj, name), value, f"{path}.{key}", found)
    elif isinstance(obj, list) and isinstance(raw, list):
        for i, (item, raw_item) in enumerate(zip(obj, raw)):
            _walk(item, raw_item, f"{path}[{i}]", found)
    elif isinstance(obj, dict) and isinstance(raw, dict):
        for key, value in raw.items():
            if key in obj:
                _walk(obj[key], value, f"{path}.{key}", found)
