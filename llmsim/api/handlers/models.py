"""GET /models and /models/{model}."""
from __future__ import annotations

from llmsim.pacing import transport
from llmsim.simulator import Simulator


class ModelsHandlers:
    def __init__(self, simulator: Simulator):
        self.simulator = simulator
        self.template = simulator.templates["models"]

    async def list_models(self):
        return transport.json_response(self.template.body_json(models=list(self.simulator.catalogue)))

    async def get_model(self, model: str):
        return transport.json_response(self.template.body_json(model=self.simulator.catalogue.get(model)))
