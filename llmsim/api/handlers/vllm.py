"""--compat vllm: vLLM's own routes, POST /tokenize, POST /detokenize and GET /version
(openapi/vllm.yaml mounts them without a prefix, as vLLM serves them). Token ids are the
model's encoding's; chat messages count as a Chat Completion's prompt_tokens do
(llmsim.sim.vllm.chat_tokens). A request naming no model uses the catalogue's first.
"""
from __future__ import annotations

from llmsim import __version__
from llmsim.pacing import transport
from llmsim.sim import chat_plan, embeddings, inputs, tokens, vllm
from llmsim.simulator import Simulator


class VllmHandlers:
    def __init__(self, simulator: Simulator):
        self.simulator = simulator
        self.templates = {name: simulator.templates[f"vllm_{name}"] for name in ("tokenize", "detokenize", "version")}

    def _model(self, body: dict):
        name = body.get("model")
        catalogue = self.simulator.catalogue
        return catalogue.get(name) if name else next(iter(catalogue))

    async def tokenize(self, body: dict):
        model = self._model(body)
        if body.get("messages") is not None:
            chat_plan.check_messages(body["messages"])
            ids = vllm.chat_tokens(inputs.chat_turns(body["messages"]), model.encoding)
        else:
            ids = tokens.encoding(model.encoding).encode_ordinary(body["prompt"])
        strs = None
        if body.get("return_token_strs"):
            enc = tokens.encoding(model.encoding)
            strs = [enc.decode_single_token_bytes(i).decode("utf-8", "replace") for i in ids]
        return transport.json_response(self.templates["tokenize"].body_json(ids=ids, count=len(ids), strs=strs,
                                                                                 model=model))

    async def detokenize(self, body: dict):
        model = self._model(body)
        text = embeddings.decode(body["tokens"], model.encoding, "tokens")
        return transport.json_response(self.templates["detokenize"].body_json(text=text))

    async def version(self):
        return transport.json_response(self.templates["version"].body_json(version=__version__))
