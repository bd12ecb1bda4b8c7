"""Conversations: create, retrieve, update metadata, delete, and their items."""
from __future__ import annotations

from llmsim.errors import InvalidRequestError, NotFoundError
from llmsim.pacing import transport
from llmsim.simulator import Simulator
from llmsim.state.responses import conversation_not_found
from llmsim.state.store import Conversation, paginate


class ConversationsHandlers:
    def __init__(self, simulator: Simulator):
        self.simulator = simulator
        self.state = simulator.state
        self.store = simulator.store

    async def _get(self, conversation_id: str) -> Conversation:
        conversation = await self.store.get_conversation(conversation_id)
        if conversation is None:
            raise conversation_not_found(conversation_id)
        return conversation

    def _reply(self, conversation: Conversation):
        return transport.json_response(self.state.render("conversation_object", conversation=conversation))

    async def create(self, body: dict | None = None):
        body = body or {}
        rng, created = self.simulator.draw()
        conversation = Conversation(self.simulator.ids.make("conversation", rng), created, body.get("metadata") or {})
        items = [self.state.item(item, rng) for item in body.get("items") or ()]
        await self.store.put_conversation(conversation)
        if items:
            await self.store.add_items(conversation.id, items)
        return self._reply(conversation)

    async def retrieve(self, conversation_id: str):
        return self._reply(await self._get(conversation_id))

    async def update(self, conversation_id: str, body: dict):
        conversation = await self._get(conversation_id)
        conversation.metadata = body.get("metadata") or {}
        await self.store.put_conversation(conversation)
        return self._reply(conversation)

    async def delete(self, conversation_id: str):
        if not await self.store.delete_conversation(conversation_id):
            raise conversation_not_found(conversation_id)
        return transport.json_response(self.state.render("deleted_conversation", id=conversation_id))

    async def list_items(self, conversation_id: str, after: str | None = None, limit: int = 20,
                         order: str = "desc", include=None):
        items = await self.store.conversation_items(conversation_id)
        if items is None:
            raise conversation_not_found(conversation_id)
        page = paginate(items, after=after, limit=limit, order=order)
        if page is None:
            raise InvalidRequestError(f"No item with id '{after}' in conversation '{conversation_id}'.",
                                      param="after")
        return transport.json_response(self.state.render("item_list", items=page.items,
                                                         has_more=page.has_more))

    async def create_items(self, conversation_id: str, body: dict, include=None):
        rng, _ = self.simulator.draw()
        items = [self.state.item(item, rng) for item in body["items"]]
        if not await self.store.add_items(conversation_id, items):
            raise conversation_not_found(conversation_id)
        return transport.json_response(self.state.render("item_list", items=items, has_more=False))

    async def retrieve_item(self, conversation_id: str, item_id: str, include=None):
        item = await self.store.get_item(conversation_id, item_id)
        if item is None:
            await self._get(conversation_id)
            raise NotFoundError(f"Item with id '{item_id}' not found.", param="item_id")
        return transport.json_response(item)

    async def delete_item(self, conversation_id: str, item_id: str):
        conversation = await self._get(conversation_id)
        if not await self.store.delete_item(conversation_id, item_id):
            raise NotFoundError(f"Item with id '{item_id}' not found.", param="item_id")
        return self._reply(conversation)
