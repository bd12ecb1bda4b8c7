"""The Gemini API (openapi/gemini.yaml): models/{model}:generateContent, :streamGenerateContent
(alt=sse) and :countTokens. The request is read in camelCase whichever spelling it used."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.pacing import transport
from llmsim.sim import geminiplan
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.handlers.generate import Generating


class GeminiHandlers:
    def __init__(self, sim: Simulator, generating: Generating):
        self.sim = sim
        self.answer = generating.create
        self.template = sim.templates["gemini"]

    async def generate(self, model: str, body: dict):
        return await self.answer({**geminiplan.camel_case(body), "model": model, "stream": False})

    async def stream(self, model: str, body: dict, alt: str = "sse"):
        return await self.answer({**geminiplan.camel_case(body), "model": model, "stream": True})

    async def count_tokens(self, model: str, body: dict):
        plan = geminiplan.count_tokens(geminiplan.camel_case(body), self.sim.context(model))
        return transport.json_response(self.template.body_json(shape="count_tokens", plan=plan, req=body))
