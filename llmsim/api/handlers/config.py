"""GET and PATCH /llmsim/config: the live settings, changed at runtime (llmsim.state.liveconfig)."""
from __future__ import annotations

import dataclasses

from llmsim import datafiles
from llmsim.pacing import transport
from llmsim.simulator import Simulator

REDACTED = "redacted"


class ConfigHandlers:
    def __init__(self, simulator: Simulator):
        self.simulator = simulator
        self.template = simulator.templates["config"]
        properties = datafiles.schema("config")["properties"]
        self.secret = {name for name, spec in properties.items() if isinstance(spec, dict) and spec.get("secret")}

    async def get(self):
        simulator = self.simulator
        simulator.refresh()
        shown = {name: (REDACTED if name in self.secret and value is not None else value)
                 for name, value in dataclasses.asdict(simulator.settings).items()}
        return transport.json_response(self.template.body_json(
            settings=shown, patchable=simulator.live.names, changed=simulator.live.changes))

    async def patch(self, body: dict):
        await self.simulator.patch(body)
        return await self.get()

    async def reset(self):
        await self.simulator.reset_settings()
        return await self.get()
