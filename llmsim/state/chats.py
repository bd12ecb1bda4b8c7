"""Stored chat completions: a Chat request with `store: true` is kept (the completion, its
request messages and metadata) in the same store as responses (llmsim.state.store: `put_chat`
and friends), to be retrieved, listed (filtered by model and metadata), updated and deleted.
The shapes sent are templates/chat_store.yaml's."""
from __future__ import annotations

from typing import Any

import orjson

from llmsim.errors import InvalidRequestError, NotFoundError
from llmsim.render.jsonbytes import dumps
from llmsim.state.store import paginate


def chat_not_found(chat_id: str) -> NotFoundError:
    return NotFoundError(f"Chat completion with id '{chat_id}' not found.", param="completion_id")


def _text(content: Any) -> str | None:
    """A message's text: its string content, or its text parts joined."""
    if content is None or isinstance(content, str):
        return content
    return "".join(part.get("text") or "" for part in content if part.get("type") == "text")


class ChatStore:
    def __init__(self, simulator):
        self.store = simulator.store
        self.template = simulator.templates["chat_store"]

    def render(self, shape: str, **values) -> bytes:
        return self.template.body_json(shape=shape, **values)

    async def save(self, body: dict, completion_json: bytes) -> None:
        completion = orjson.loads(completion_json)
        record = {"id": completion["id"], "model": completion["model"], "metadata": body.get("metadata") or {},
                  "completion": completion, "messages": body["messages"]}
        await self.store.put_chat(completion["id"], dumps(record))

    async def get(self, chat_id: str) -> dict:
        raw = await self.store.get_chat(chat_id)
        if raw is None:
            raise chat_not_found(chat_id)
        return orjson.loads(raw)

    async def update(self, chat_id: str, metadata: dict | None) -> dict:
        record = await self.get(chat_id)
        record["metadata"] = metadata or {}
        await self.store.put_chat(chat_id, dumps(record))
        return record

    async def delete(self, chat_id: str) -> None:
        if not await self.store.delete_chat(chat_id):
            raise chat_not_found(chat_id)

    async def page(self, model: str | None, metadata: dict | None, after: str | None, limit: int,
                   order: str):
        records = [orjson.loads(raw) for raw in await self.store.chats()]
        wanted = (metadata or {}).items()
        chosen = [r for r in records if (model is None or r["model"] == model)
                  and all(r["metadata"].get(k) == v for k, v in wanted)]
        found = paginate(chosen, after=after, limit=limit, order=order)
        if found is None:
            raise InvalidRequestError(f"No chat completion with id '{after}' in this list.", param="after")
        return found

    @staticmethod
    def messages(record: dict) -> list[dict]:
        """The request messages as the API lists them: each with an id and its text."""
        return [{"id": f"{record['id']}-{i}", "message": message, "text": _text(message.get("content"))}
                for i, message in enumerate(record["messages"])]
