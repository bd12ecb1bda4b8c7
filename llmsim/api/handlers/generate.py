"""The handler of every generating operation: its API's adapter through the one pipeline
(llmsim.api.pipeline)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.server.context import RECEIVED_AT

if TYPE_CHECKING:   # types only
    from llmsim.api.adapters import Adapter
    from llmsim.api.current import Current
    from llmsim.api.pipeline import Pipeline


class Generating:
    def __init__(self, pipeline: Pipeline, adapter: Adapter, current: Current):
        self.answer, self.adapter, self.received_at = pipeline.answer, adapter, current.received_at

    async def create(self, body: dict):
        return await self.answer(self.adapter, body, self.received_at())

    def scoped(self, body: dict, scope):
        """The fast lane's call (llmsim.api.fastpath): when the server read it, from its scope."""
        extensions = scope.get("extensions")
        return self.answer(self.adapter, body, extensions.get(RECEIVED_AT) if extensions else None)

    compact = create        # POST /responses/compact's operation
