"""Gemini embeddings (openapi/gemini.yaml): models/{model}:embedContent and :batchEmbedContents,
answered in Google's shape (templates/gemini_embeddings.yaml). The request is read in camelCase
whichever spelling it used."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.api import answer
from llmsim.sim import embeddings, geminiplan
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.current import Current

API = "gemini"      # its name to faults and stats


class GeminiEmbedHandlers:
    def __init__(self, sim: Simulator, current: Current):
        self.sim = sim
        self.received_at, self.request_headers = current.received_at, current.request_headers
        self.template = sim.templates["gemini_embeddings"]

    async def embed(self, model: str, body: dict):
        return await self._answer(model, [geminiplan.camel_case(body)], "embedContent", "embed")

    async def batch(self, model: str, body: dict):
        return await self._answer(model, geminiplan.camel_case(body)["requests"], "batchEmbedContents", "batch")

    async def _answer(self, model: str, requests: list[dict], method: str, shape: str):
        sim = self.sim
        start = sim.clock.began(self.received_at())
        fault = sim.faults.begin(API, {"model": model}, self.request_headers())
        if fault.waits:                 # a timeout's error, or what a shared schedule decides
            await fault.wait()
        plan = embeddings.plan_gemini(requests, sim.context(model), sim.catalogue.find(model) is not None, method)
        sim.stats.record(plan, API)
        return await answer.reply(sim, self.template, plan, start, shape=shape)
