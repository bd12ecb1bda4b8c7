"""POST /responses/compact: a conversation's user messages and one compaction item."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.api import answer
from llmsim.sim import compaction
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.current import Current


class CompactionHandlers:
    def __init__(self, sim: Simulator, current: Current):
        self.sim = sim
        self.received_at, self.request_headers = current.received_at, current.request_headers
        self.template = sim.templates["compaction"]

    async def compact(self, body: dict):
        sim = self.sim
        start = sim.clock.began(self.received_at())
        fault = sim.faults.begin("compact", body, self.request_headers())
        if fault.waits:                 # a timeout's error, or what a shared schedule decides
            await fault.wait()
        prior = await sim.state.prior(body)         # previous_response_id: what it continues
        ctx = sim.context(body["model"])
        items = [*prior.items, *sim.state.shaped(sim.state.input_items(body, ctx.rng))]
        plan = compaction.plan_compaction(body, ctx, items)
        sim.stats.record(plan, "responses")
        return await answer.reply(sim, self.template, plan, start)
