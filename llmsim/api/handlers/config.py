"""GET and PATCH /llmsim/config: the live settings, changed at runtime (llmsim.state.liveconfig)."""
from __future__ import annotations

import dataclasses

from llmsim import datafiles
from llmsim.pacing import transport
from llmsim.simulator import Simulator

REDACTED = "redacted"


class ConfigHandlers:
    def __init__(self, sim: Simulator):
        self.sim = sim
        self.template = sim.templates["config"]
        properties = datafiles.schema("config")["properties"]
        self.secret = {name for name, spec in properties.items() if isinstance(spec, dict) and spec.get("secret")}

    async def get(self):
        sim = self.sim
        sim.refresh()
        shown = {name: (REDACTED if name in self.secret and value is not None else value)
                 for name, value in dataclasses.asdict(sim.settings).items()}
        return transport.json_response(self.template.body_json(
            settings=shown, patchable=sim.live.names, changed=sim.live.changes))

    async def patch(self, body: dict):
        await self.sim.patch(body)
        return await self.get()

    async def reset(self):
        await self.sim.reset_settings()
        return await self.get()
