"""Stored chat completions: GET /chat/completions (a page, filtered by model and metadata),
GET / POST (metadata) / DELETE /chat/completions/{id}, and its messages."""
from __future__ import annotations

from llmsim.errors import InvalidRequestError
from llmsim.pacing import transport
from llmsim.simulator import Simulator
from llmsim.state.chats import ChatStore
from llmsim.state.store import paginate


class ChatStoreHandlers:
    def __init__(self, simulator: Simulator):
        self.chats = ChatStore(simulator)

    def _reply(self, shape: str, **values):
        return transport.json_response(self.chats.render(shape, **values))

    async def list_completions(self, model: str | None = None, metadata: dict | None = None,
                               after: str | None = None, limit: int = 20, order: str = "asc"):
        page = await self.chats.page(model, metadata, after, limit, order)
        return self._reply("stored_chat_completion_list", records=page.items, has_more=page.has_more)

    async def retrieve(self, completion_id: str):
        return self._reply("stored_chat_completion", record=await self.chats.get(completion_id))

    async def update(self, completion_id: str, body: dict):
        record = await self.chats.update(completion_id, body.get("metadata"))
        return self._reply("stored_chat_completion", record=record)

    async def delete(self, completion_id: str):
        await self.chats.delete(completion_id)
        return self._reply("deleted_chat_completion", id=completion_id)

    async def list_messages(self, completion_id: str, after: str | None = None, limit: int = 20,
                            order: str = "asc"):
        entries = self.chats.messages(await self.chats.get(completion_id))
        page = paginate(entries, after=after, limit=limit, order=order)
        if page is None:
            raise InvalidRequestError(f"No message with id '{after}' in chat completion '{completion_id}'.",
                                      param="after")
        return self._reply("stored_chat_message_list", entries=page.items, has_more=page.has_more)
