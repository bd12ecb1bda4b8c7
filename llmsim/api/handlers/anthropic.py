"""Anthropic Messages (openapi/anthropic.yaml): POST /messages, /messages/count_tokens, and
GET /models, /models/{model_id} in Anthropic's shape."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from llmsim.pacing import transport
from llmsim.sim import anthropic_plan
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.handlers.generate import Generating


def _rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AnthropicHandlers:
    def __init__(self, simulator: Simulator, generating: Generating):
        self.simulator = simulator
        self.create = generating.create         # POST /messages: the pipeline
        self.models = simulator.templates["anthropic_models"]
        self.counted = simulator.templates["anthropic_count_tokens"]

    async def count_tokens(self, body: dict):
        model = self.simulator.catalogue.get(body["model"])
        return transport.json_response(self.counted.body_json(input_tokens=anthropic_plan.count_input(body, model)))

    async def list_models(self, limit: int = 20, before_id: str | None = None, after_id: str | None = None):
        models = list(self.simulator.catalogue)
        ids = [m.id for m in models]
        if after_id in ids:
            models = models[ids.index(after_id) + 1:]
        elif before_id in ids:
            models = models[:ids.index(before_id)]
        page = models[-limit:] if before_id in ids and after_id not in ids else models[:limit]
        return transport.json_response(self.models.body_json(
            models=[(m, _rfc3339(m.created)) for m in page], has_more=len(models) > limit))

    async def get_model(self, model_id: str):
        model = self.simulator.catalogue.get(model_id)
        return transport.json_response(self.models.body_json(model=model, created_at=_rfc3339(model.created)))
