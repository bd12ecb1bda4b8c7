"""The Gemini API (openapi/gemini.yaml): models/{model}:generateContent, :streamGenerateContent
(alt=sse), :embedContent, :batchEmbedContents and :countTokens. The request is read in camelCase whichever spelling it used."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.pacing import transport
from llmsim.sim import embeddings, geminiplan
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.handlers.generate import Generating


class GeminiHandlers:
    def __init__(self, sim: Simulator, generating: Generating, embedding: Generating):
        self.sim = sim
        self.answer, self.embedding = generating.create, embedding.create
        self.template = sim.templates["gemini"]

    async def generate(self, model: str, body: dict):
        return await self.answer({**geminiplan.camel_case(body), "model": model, "stream": False})

    async def stream(self, model: str, body: dict, alt: str = "sse"):
        return await self.answer({**geminiplan.camel_case(body), "model": model, "stream": True})

    async def embed(self, model: str, body: dict):
        return await self.embedding(embeddings.gemini_request(model, "embedContent", body))

    async def batch(self, model: str, body: dict):
        return await self.embedding(embeddings.gemini_request(model, "batchEmbedContents", body))

    async def count_tokens(self, model: str, body: dict):
        plan = geminiplan.count_tokens(geminiplan.camel_case(body), self.sim.context(model))
        return transport.json_response(self.template.body_json(shape="count_tokens", plan=plan, req=body))
