"""POST /completions (legacy): JSON, or SSE chunks ending with [DONE] when stream is true."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.api import answer
from llmsim.sim import completionplan
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.current import Current


class CompletionsHandlers:
    def __init__(self, sim: Simulator, current: Current):
        self.sim = sim
        self.received_at, self.request_headers = current.received_at, current.request_headers
        self.template = sim.templates["completions"]

    async def create(self, body: dict):
        sim = self.sim
        start = sim.clock.began(self.received_at())
        fault = sim.faults.begin("completions", body, self.request_headers())
        if fault.waits:                 # a timeout's error, or what a shared schedule decides
            fault = await fault.wait()
        plan = completionplan.plan_completion(body, sim.context(body["model"]))
        if fault:                       # a content filter cuts the choices
            plan = fault.shape(plan)
        sim.stats.record(plan, "completions", bool(body.get("stream")))
        return await answer.reply(sim, self.template, plan, start, body.get("stream"), fault, req=body)
