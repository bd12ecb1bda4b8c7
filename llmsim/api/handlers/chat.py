"""POST /chat/completions."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.api import ratelimiting
from llmsim.pacing import transport
from llmsim.sim import chatplan

if TYPE_CHECKING:   # types only: the composition root sits above the API
    from llmsim.api.current import Current
    from llmsim.simulator import Simulator


class ChatHandlers:
    def __init__(self, sim: Simulator, current: Current):
        self.sim = sim
        self.received_at, self.request_headers = current.received_at, current.request_headers
        self.template = sim.templates["chat"]

    async def create(self, body: dict):
        sim = self.sim
        start = sim.clock.began(self.received_at())
        sim.refresh()                   # settings changed at runtime by another process
        fault = sim.faults.begin("chat", body, self.request_headers())
        if fault.waits:                 # a timeout's error, or what a shared schedule decides
            fault = await fault.wait()
        ctx = sim.context(body["model"])
        plan = chatplan.plan_chat(body, ctx)
        if sim.limiter.limits is not None:      # rate limits: take its cost, or 429
            cap = body.get("max_completion_tokens")
            await ratelimiting.take(sim, ctx.model, plan.usage.input_tokens,
                                    body.get("max_tokens") if cap is None else cap, body.get("n") or 1)
        if fault:                       # (a request with no fault calls none of it)
            plan = fault.shape(plan)
        sim.stats.record(plan, "chat", bool(body.get("stream")))
        if body.get("stream"):
            frames = fault.frames(self.template, plan=plan, req=body)
            keepalive = sim.settings.keepalive_ms / 1000 if sim.settings.keepalive_ms else None
            return transport.SSEResponse(transport.Paced(frames, start, sim.clock, keepalive,
                                                         sim.stats.lateness))
        if plan.end_at or not sim.clock.realtime:    # an instant answer waits for nothing
            await sim.clock.sleep_until(start + plan.end_at)
        return transport.json_response(self.template.body_json(plan=plan, req=body))
