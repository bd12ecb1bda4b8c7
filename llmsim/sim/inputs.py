"""Conversation input, read the same way for every API: what was said, by whom, how many tokens.

Responses `input` (a string or items) and Chat `messages` both become a list of `Turn`s;
token counts follow OpenAI's chat accounting (tokens.py) over the text actually sent.
"""
from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable

from llmsim.errors import InvalidRequestError
from llmsim.sim import tokens


@dataclass(slots=True)
class Turn:
    role: str
    texts: list[str] = field(default_factory=list)
    images: int = 0
    name: str | None = None
    path: str = ""          # where in the request this turn sits, for error messages
    calls: tuple = ()       # the function calls it makes: (call_id, name) pairs
    call_id: str | None = None   # a tool result: the call it answers


def content_texts(content: Any, turn: Turn, path: str) -> None:
    if content is None:
        return
    if isinstance(content, str):
        turn.texts.append(content)
        return
    for i, part in enumerate(content):
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "refusal", "summary_text", "reasoning_text"):
            turn.texts.append(part.get("text") or part.get("refusal") or "")
        elif kind in ("input_image", "image_url"):
            turn.images += 1
            turn.path = f"{path}[{i}]"


def responses_turns(body: dict) -> list[Turn]:
    """Turns of a Responses request (instructions first, as a system turn)."""
    turns = []
    if body.get("instructions"):
        turns.append(Turn("system", [body["instructions"]], path="instructions"))
    turns.extend(items_turns(body.get("input"), "input"))
    return turns


def items_turns(items: Any, path: str) -> list[Turn]:
    if items is None:
        return []
    if isinstance(items, str):
        return [Turn("user", [items], path=path)]
    turns = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            turn = Turn(item.get("role", "user"), path=where)
            content_texts(item.get("content"), turn, f"{where}.content")
        elif kind == "function_call":
            turn = Turn("assistant", [item.get("name", ""), item.get("arguments", "")], path=where,
                        calls=((item.get("call_id"), item.get("name")),))
        elif kind == "function_call_output":
            output = item.get("output")
            turn = Turn("tool", path=where, call_id=item.get("call_id"))
            content_texts(output, turn, f"{where}.output")
        elif kind == "reasoning":
            turn = Turn("assistant", path=where)
            for part in item.get("summary") or []:
                turn.texts.append(part.get("text", ""))
        elif kind == "compaction":        # what it compacted, as its summary
            turn = Turn("assistant", [summary_of(item.get("encrypted_content"))], path=where)
        else:
            turn = Turn("user", path=where)
            content_texts(item.get("content"), turn, f"{where}.content")
        turns.append(turn)
    return turns


def chat_turns(messages: list[dict]) -> list[Turn]:
    turns = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        turn = Turn(message["role"], name=message.get("name"), path=where,
                    call_id=message.get("tool_call_id"))
        content = message.get("content")
        if content.__class__ is str:        # (most messages: content_texts' first case, without its call)
            turn.texts.append(content)
        else:
            content_texts(content, turn, f"{where}.content")
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            turn.texts += [fn.get("name", ""), fn.get("arguments", "")]
            turn.calls += ((call.get("id"), fn.get("name")),)
        turns.append(turn)
    return turns


def count(turns: Iterable[Turn], encoding: str) -> int:
    count_text = tokens.count
    total = tokens.REPLY_PRIMING
    for turn in turns:
        total += tokens.TOKENS_PER_MESSAGE + count_text(turn.role, encoding)
        for text in turn.texts:
            total += count_text(text, encoding)
        total += turn.images * tokens.IMAGE_TOKENS
        if turn.name:
            total += tokens.TOKENS_PER_NAME + count_text(turn.name, encoding)
    return total


def last_user_text(turns: list[Turn]) -> str:
    for turn in reversed(turns):
        if turn.role == "user" and turn.texts:
            return "\n".join(turn.texts)
    return ""


def check_vision(turns: list[Turn], model) -> None:
    if model.vision:
        return
    for turn in turns:
        if turn.images:
            raise InvalidRequestError(f"The model '{model.id}' does not support image inputs.",
                                      param=turn.path, code="invalid_value")


# A compaction item (llmsim.sim.compaction) carries the summary of what it compacted, sealed in
# its `encrypted_content`: read back here as the text the model would see.
SEAL = "gAAAAA"             # how OpenAI's encrypted contents start


def seal(summary: str) -> str:
    return SEAL + base64.urlsafe_b64encode(zlib.compress(summary.encode())).decode()


def summary_of(encrypted: str | None) -> str:
    """The summary a compaction item carries ("" for content llmsim did not seal)."""
    if not encrypted or not encrypted.startswith(SEAL):
        return ""
    try:
        return zlib.decompress(base64.urlsafe_b64decode(encrypted[len(SEAL):])).decode()
    except (ValueError, zlib.error):
        return ""
