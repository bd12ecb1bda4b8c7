"""The handler of every generating operation: its API's adapter through the one pipeline
(llmsim.api.pipeline)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # types only
    from llmsim.api.adapters import Adapter
    from llmsim.api.current import Current
    from llmsim.api.pipeline import Pipeline


class Generating:
    """`received(body, received_at)`: the fast lane's call (llmsim.api.fastpath), which knows
    when the server read the request; it is the adapter's lane itself (`Pipeline.attach`: no
    request context to set, no coroutine of its own)."""

    def __init__(self, pipeline: Pipeline, adapter: Adapter, current: Current):
        self.adapter, self.received_at = adapter, current.received_at
        pipeline.attach(self, adapter)

    async def create(self, body: dict):     # connexion's handler: the time as the request context says
        return await self.received(body, self.received_at())

    compact = create        # POST /responses/compact's operation
