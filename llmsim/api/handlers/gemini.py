"""The Gemini API (openapi/gemini.yaml): models/{model}:generateContent, :streamGenerateContent
(alt=sse), :embedContent, :batchEmbedContents and :countTokens. The request is read in camelCase whichever spelling it used."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.pacing import transport
from llmsim.sim import embeddings, gemini_plan
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.handlers.generate import Generating


class GeminiHandlers:
    def __init__(self, simulator: Simulator, generating: Generating, embedding: Generating):
        self.simulator = simulator
        self.answer, self.embedding = generating.create, embedding.create
        self.template = simulator.templates["gemini"]

    async def generate(self, model: str, body: dict):
        return await self.answer({**gemini_plan.camel_case(body), "model": model, "stream": False})

    async def stream(self, model: str, body: dict, alt: str = "sse"):
        return await self.answer({**gemini_plan.camel_case(body), "model": model, "stream": True})

    async def embed(self, model: str, body: dict):
        return await self.embedding(embeddings.gemini_request(model, "embedContent", body))

    async def batch(self, model: str, body: dict):
        return await self.embedding(embeddings.gemini_request(model, "batchEmbedContents", body))

    async def count_tokens(self, model: str, body: dict):
        plan = gemini_plan.count_tokens(gemini_plan.camel_case(body), self.simulator.context(model))
        return transport.json_response(self.template.body_json(shape="count_tokens", plan=plan, req=body))
