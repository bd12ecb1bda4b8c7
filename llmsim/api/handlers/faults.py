"""GET, POST and DELETE /llmsim/faults: the fault injector's state, changed at runtime."""
from __future__ import annotations

from llmsim.pacing import transport
from llmsim.simulator import Simulator


class FaultsHandlers:
    def __init__(self, simulator: Simulator):
        self.faults = simulator.faults
        self.template = simulator.templates["faults"]

    async def get_state(self):
        return transport.json_response(self.template.body_json(injector=await self.faults.state()))

    async def update(self, body: dict):
        await self.faults.update(body.get("schedule"), bool(body.get("replace")), body.get("errors"))
        return await self.get_state()

    async def clear(self):
        await self.faults.clear()
        return await self.get_state()
