"""Anthropic Messages (openapi/anthropic.yaml): POST /messages, /messages/count_tokens, and
GET /models, /models/{model_id} in Anthropic's shape."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from llmsim.api import answer
from llmsim.pacing import transport
from llmsim.sim import messages
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.current import Current


def _rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AnthropicHandlers:
    def __init__(self, sim: Simulator, current: Current):
        self.sim = sim
        self.received_at, self.request_headers = current.received_at, current.request_headers
        self.template = sim.templates["anthropic"]
        self.models = sim.templates["anthropic_models"]
        self.counted = sim.templates["anthropic_count_tokens"]
        self.cache = messages.PromptCache(sim.clock)     # this process's cached prompt prefixes

    async def create(self, body: dict):
        sim = self.sim
        start = sim.clock.began(self.received_at())
        fault = sim.faults.begin("anthropic", body, self.request_headers())
        if fault.waits:
            fault = await fault.wait()
        ctx = sim.context(body["model"])
        serving = answer.serving(sim, ctx.profile)
        prefix = serving is not None and serving.prefix_cache     # the serving model's cache, else its own
        plan = messages.plan_message(body, ctx)
        if not prefix:
            plan.usage.cached_tokens = self.cache.read(plan.marked, ctx.model)
        if fault:
            plan = fault.shape(plan)
        ticket = None
        if serving is not None:         # a slot, and the prefix cache's reads (tools, system, messages)
            ticket = await sim.serving.admit(serving, plan, None, messages.cache_order(messages.turns(body)),
                                             ctx.model.encoding, start)
        sim.stats.record(plan, "messages", bool(body.get("stream")), ticket.delay if ticket is not None else 0.0)
        return await answer.reply(sim, self.template, plan, start, body.get("stream"), fault, ticket, req=body)

    async def count_tokens(self, body: dict):
        model = self.sim.catalogue.get(body["model"])
        return transport.json_response(self.counted.body_json(input_tokens=messages.count_input(body, model)))

    async def list_models(self, limit: int = 20, before_id: str | None = None, after_id: str | None = None):
        models = list(self.sim.catalogue)
        ids = [m.id for m in models]
        if after_id in ids:
            models = models[ids.index(after_id) + 1:]
        elif before_id in ids:
            models = models[:ids.index(before_id)]
        page = models[-limit:] if before_id in ids and after_id not in ids else models[:limit]
        return transport.json_response(self.models.body_json(
            models=[(m, _rfc3339(m.created)) for m in page], has_more=len(models) > limit))

    async def get_model(self, model_id: str):
        model = self.sim.catalogue.get(model_id)
        return transport.json_response(self.models.body_json(model=model, created_at=_rfc3339(model.created)))
