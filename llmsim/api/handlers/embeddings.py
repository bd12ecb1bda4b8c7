"""POST /embeddings."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.api import answer
from llmsim.sim import embeddings
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.current import Current


class EmbeddingsHandlers:
    def __init__(self, sim: Simulator, current: Current):
        self.sim = sim
        self.received_at, self.request_headers = current.received_at, current.request_headers
        self.template = sim.templates["embeddings"]

    async def create(self, body: dict):
        sim = self.sim
        start = sim.clock.began(self.received_at())
        fault = sim.faults.begin("embeddings", body, self.request_headers())
        if fault.waits:                 # a timeout's error, or what a shared schedule decides
            await fault.wait()
        plan = embeddings.plan_embeddings(body, sim.context(body["model"]), body["model"] in sim.catalogue.models)
        sim.stats.record(plan, "embeddings")
        return await answer.reply(sim, self.template, plan, start)
