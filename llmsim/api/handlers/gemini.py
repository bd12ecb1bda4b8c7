"""The Gemini API (openapi/gemini.yaml): models/{model}:generateContent, :streamGenerateContent
(alt=sse) and :countTokens. The request is read in camelCase whichever spelling it used."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.api import answer
from llmsim.pacing import transport
from llmsim.sim import geminiplan
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.current import Current

API = "gemini"      # its name to faults (templates/faults.yaml) and stats


class GeminiHandlers:
    def __init__(self, sim: Simulator, current: Current):
        self.sim = sim
        self.received_at, self.request_headers = current.received_at, current.request_headers
        self.template = sim.templates["gemini"]

    async def generate(self, model: str, body: dict):
        return await self._answer(model, body, stream=False)

    async def stream(self, model: str, body: dict, alt: str = "sse"):
        return await self._answer(model, body, stream=True)

    async def count_tokens(self, model: str, body: dict):
        plan = geminiplan.count_tokens(geminiplan.camel_case(body), self.sim.context(model))
        return transport.json_response(self.template.body_json(shape="count_tokens", plan=plan, req=body))

    async def _answer(self, model: str, body: dict, stream: bool):
        sim = self.sim
        start = sim.clock.began(self.received_at())
        req = {**geminiplan.camel_case(body), "model": model, "stream": stream}   # what faults read
        fault = sim.faults.begin(API, req, self.request_headers())
        if fault.waits:                 # a timeout's error, or what a shared schedule decides
            fault = await fault.wait()
        ctx = sim.context(model)
        plan = geminiplan.plan_generate(req, ctx)
        if fault:
            plan = fault.shape(plan)
        ticket = None
        if (serving := answer.serving(sim, ctx.profile)) is not None:   # a slot, and implicit cache hits
            ticket = await sim.serving.admit(serving, plan, None, geminiplan.turns(req), ctx.model.encoding, start)
        sim.stats.record(plan, API, stream, ticket.delay if ticket is not None else 0.0)
        return await answer.reply(sim, self.template, plan, start, stream, fault, ticket, req=req, shape="generate")
