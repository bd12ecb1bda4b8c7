"""Adapters: what one API says to the pipeline (llmsim.api.pipeline), and nothing else.

An adapter names its API to faults, scenarios and replay (`name`), to stats (`endpoint`) and to
rate limits (`provider`: whose headers and 429); it says how to read a request's model, turns
and history, which sim/ planner plans it, its rate-limit cost, what the serving model's prefix
cache reads, and how the answer is delivered and kept. Flags say where a capability means
nothing (`scripts`, `serves`, `replays`: embeddings and moderations generate no turns);
docs/architecture.md lists them. A new API is an OpenAPI document, templates and one adapter.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from llmsim.api import answer
from llmsim.pacing import transport
from llmsim.sim import (anthropic_plan, chat_plan, compaction, completions_plan, embeddings, gemini_plan, inputs,
                        moderation)
from llmsim.sim import responses_plan as planning
from llmsim.sim.responses_plan import Context
from llmsim.state.chats import ChatStore
from llmsim.state.responses import Replay, wants_store

MARKED_ENTRIES = 10_000          # marked prefixes a model's prefix cache keeps (least recently used go)

if TYPE_CHECKING:   # types only
    from llmsim.api.pipeline import Call
    from llmsim.simulator import Simulator


class Adapter:
    """The defaults: an OpenAI API that streams when asked, answered by `reply`."""
    name: ClassVar[str]             # to faults, scenarios and replay (templates/faults.yaml's APIs)
    endpoint: ClassVar[str]         # to stats and metrics
    provider: ClassVar[str] = "openai"
    template_name: ClassVar[str]
    scripts = serves = replays = seeded = records = generates = True
    history = False                 # it continues stored history (`prior`)
    # `planner(req, ctx, script)`: the sim/ function that plans it, where `plan` is only that
    planner: ClassVar[Any] = None
    marks = False                   # it marks prefixes to cache (`read_marks`)

    def __init__(self, simulator: Simulator):
        self.simulator = simulator
        self.template = simulator.templates[self.template_name]

    # -- reading the request --
    def model(self, req: dict) -> str:
        return req["model"]

    def deferred(self, req: dict) -> bool:
        """Its serving slot is waited for later (a background response's job)."""
        return False

    def scriptable(self, call: Call) -> bool:
        """Whether scenarios may script this request (asked only when one might)."""
        return True

    def context(self, req: dict, ctrl) -> Context:      # (an adapter with its own `model` has its own)
        return self.simulator.context(req["model"], ctrl)

    def turns(self, call: Call) -> list[inputs.Turn]:
        """The conversation so far, the request's own turns last (what scenarios count)."""
        raise NotImplementedError

    def cache_turns(self, call: Call) -> list[inputs.Turn]:
        """What the prefix cache reads, in its order."""
        return self.turns(call)

    def cache_key(self, req: dict) -> str | None:
        return None

    def cost(self, req: dict) -> tuple[int | None, int]:
        """The output cap a rate limit counts (None: the model's largest) and the choices."""
        return req.get("max_tokens"), 1

    def prior(self, call: Call) -> Any:
        """What the request continues (for an adapter with `history`), or a coroutine of it
        when that must be read (the pipeline awaits it)."""
        return None

    # -- planning and delivery --
    def plan(self, call: Call, ctx: Context, script):
        """The sim/ plan of the request (the lane calls `planner` itself when there is one)."""
        return self.planner(call.req, ctx, script)

    def variables(self, call: Call) -> dict:
        return {"req": call.req}

    async def deliver(self, call: Call):
        return await answer.reply(self.simulator, self.template, call.plan, call.start, call.req.get("stream"),
                                  call.fault, call.ticket, **self.variables(call))


class Responses(Adapter):
    name = endpoint = template_name = "responses"
    history = True

    def __init__(self, simulator):
        super().__init__(simulator)
        self.state = simulator.state

    def turns(self, call):
        return [*call.prior.turns, *inputs.responses_turns(call.req)]

    def cache_key(self, req):
        return req.get("prompt_cache_key")

    def cost(self, req):
        return req.get("max_output_tokens"), 1

    def deferred(self, req):
        return bool(req.get("background"))

    def prior(self, call):
        return self.state.prior(call.req)

    def plan(self, call, ctx, script):
        return planning.plan_response(call.req, ctx, call.prior.turns, script=script)

    async def deliver(self, call):
        body, plan, state = call.req, call.plan, self.state
        store = wants_store(body)
        own = state.input_items(body, call.ctx.rng) if store else []
        if body.get("background"):
            events = call.fault.marked(self.template, plan=plan, req=body)   # (the job reads their roles)
            job, queued = await state.jobs.start(body, call.prior, own, events, call.start, call.admission)
            return transport.SSEResponse(job.follow(-1)) if body.get("stream") else transport.json_response(queued)
        if body.get("stream"):
            fault = call.fault
            chunks = answer.events(self.simulator, fault.frames(self.template, plan=plan, req=body), call.start,
                                   call.ticket)
            if store:                   # a stream no fault cut can be rendered again when read
                replay = None if fault.cuts_stream else Replay(self.template, plan, body)
                chunks = state.record_stream(chunks, body, call.prior, own, replay)
            return transport.SSEResponse(chunks)
        if (waiting := answer.wait(self.simulator, plan, call.start, call.ticket)) is not None:
            await waiting
        content = self.template.body_json(plan=plan, req=body)
        if store:                       # the store keeps these bytes (at once in a store that can)
            prior = call.prior
            if (saving := state.save(body, prior, own, content, plan=plan)) is not None:
                await saving
            if prior.conversation:      # its items join the conversation
                await state.add_to_conversation(body, prior, own, content)
        return transport.json_response(content)


class Chat(Adapter):
    name = endpoint = template_name = "chat"

    def __init__(self, simulator):
        super().__init__(simulator)
        self.stored = ChatStore(simulator)

    def turns(self, call):
        return chat_plan.turns(call.req)

    def cache_key(self, req):
        return req.get("prompt_cache_key")

    def cost(self, req):
        cap = req.get("max_completion_tokens")
        return (req.get("max_tokens") if cap is None else cap), req.get("n") or 1

    planner = staticmethod(chat_plan.plan_chat)

    async def deliver(self, call):
        body, plan = call.req, call.plan
        if body.get("stream"):
            fault = call.fault
            if body.get("store") and not fault.cuts_stream:     # the completion the stream makes
                await self.stored.save(body, self.template.body_json(plan=plan, req=body))
            return transport.SSEResponse(answer.events(self.simulator, fault.frames(self.template, plan=plan, req=body),
                                                       call.start, call.ticket))
        if (waiting := answer.wait(self.simulator, plan, call.start, call.ticket)) is not None:
            await waiting
        content = self.template.body_json(plan=plan, req=body)
        if body.get("store"):
            await self.stored.save(body, content)
        return transport.json_response(content)


class Completions(Adapter):
    name = endpoint = template_name = "completions"

    def turns(self, call):
        return completions_plan.turns(call.req, call.ctx.model.encoding if call.ctx else completions_plan.TURN_ENCODING)

    def cost(self, req):
        cap = req.get("max_tokens")
        prompts = req["prompt"]
        count = len(prompts) if isinstance(prompts, list) and prompts and not isinstance(prompts[0], int) else 1
        return (completions_plan.DEFAULT_MAX_TOKENS if cap is None else cap), (req.get("n") or 1) * count

    def plan(self, call, ctx, script):
        return completions_plan.plan_completion(call.req, ctx, None, script)


class Messages(Adapter):
    """Anthropic's Messages API."""
    name, endpoint, provider, template_name = "anthropic", "messages", "anthropic", "anthropic"

    def turns(self, call):
        return anthropic_plan.turns(call.req)

    def cache_turns(self, call):
        return anthropic_plan.cache_order(anthropic_plan.turns(call.req))

    marks = True        # `cache_control` marks a prefix to cache

    def plan(self, call, ctx, script):
        return anthropic_plan.plan_message(call.req, ctx, None, script)

    async def read_marks(self, call, cache) -> None:
        """Anthropic's explicit caching, from the prefix cache (when the serving model's does not
        read every prefix): the marked prefix is read whole if cached, and kept."""
        plan = call.plan
        if plan.marked is not None:
            prefix, _, tokens = plan.marked
            hits = await cache.lookup(plan.model, [anthropic_plan.marked_key(plan.model, prefix)], MARKED_ENTRIES, tokens)
            plan.usage.cached_tokens = tokens * hits


class Gemini(Adapter):
    """Gemini's generateContent and streamGenerateContent (the request camelCased, with its
    model and whether it streams, by the handler)."""
    name = endpoint = template_name = "gemini"
    provider = "gemini"

    def turns(self, call):
        return gemini_plan.turns(call.req)

    def cost(self, req):
        config = req.get("generationConfig") or {}
        return config.get("maxOutputTokens"), config.get("candidateCount") or 1

    def plan(self, call, ctx, script):
        return gemini_plan.plan_generate(call.req, ctx, None, script)

    def variables(self, call):
        return {"req": call.req, "shape": "generate"}


class Embeddings(Adapter):
    """Embeddings: no turns to script, no generation to serve; faults, limits, seeds, stats."""
    name = endpoint = template_name = "embeddings"
    scripts = serves = generates = seeded = False      # (equal texts always embed alike)

    def turns(self, call):
        return []

    def plan(self, call, ctx, script):
        model = self.model(call.req)
        return embeddings.plan_embeddings(call.req, ctx, model in self.simulator.catalogue.models)

    def variables(self, call):
        return {}


class Moderations(Embeddings):
    name = endpoint = template_name = "moderations"
    seeded = True               # (its id)

    def __init__(self, simulator):
        super().__init__(simulator)
        self.rules = moderation.Rules.load(simulator.settings.data_file("moderation.yaml"), simulator.profiles)  # at start-up

    def model(self, req):
        return req.get("model") or self.rules.default_model

    def context(self, req, ctrl):
        return self.simulator.context(self.model(req), ctrl, model=moderation.Model(self.model(req)),
                                profile=self.simulator.profile_for(self.rules))

    def plan(self, call, ctx, script):
        return moderation.plan_moderation(call.req, self.rules, ctx)


class GeminiEmbed(Embeddings):
    """Gemini's embedContent and batchEmbedContents (`embeddings.gemini_request`)."""
    name = endpoint = "gemini_embed"
    provider, template_name = "gemini", "gemini_embeddings"

    def cost(self, req):
        return None, len(req["requests"])

    def plan(self, call, ctx, script):
        req = call.req
        return embeddings.plan_gemini(req["requests"], ctx, self.simulator.catalogue.find(req["model"]) is not None,
                                      req["method"])

    def variables(self, call):
        return {"shape": call.req["shape"]}


class Compaction(Embeddings):
    """POST /responses/compact: a conversation's user messages and one compaction item."""
    name, endpoint, template_name = "compact", "responses", "compaction"
    history = seeded = True

    def prior(self, call):
        return self.simulator.state.prior(call.req)     # previous_response_id: what it continues

    def plan(self, call, ctx, script):
        state = self.simulator.state
        items = [*call.prior.items, *state.shaped(state.input_items(call.req, ctx.rng))]
        return compaction.plan_compaction(call.req, ctx, items)


class ResponsesSocket(Responses):
    """Responses over a WebSocket: `call.extra` is the connection (llmsim.api.websocket), whose
    latest response `previous_response_id` may name; its turns are counted as they are sent."""
    name = endpoint = "websocket"
    records = replays = False           # (counted as sent; `llmsim record` proxies HTTP only)

    def deferred(self, req):
        return False

    def scriptable(self, call):
        return call.extra.generate          # (not a warm-up)

    async def prior(self, call):
        return await call.extra.history(call.req.get("previous_response_id"))

    def turns(self, call):
        return [*call.prior, *inputs.responses_turns(call.req)]

    def plan(self, call, ctx, script):
        return planning.plan_response(call.req, ctx, call.prior, call.extra.generate, script)

    async def deliver(self, call):
        await call.extra.send(call)


ADAPTERS = (Responses, Chat, Completions, Messages, Gemini, Embeddings, GeminiEmbed, Moderations, Compaction,
            ResponsesSocket)


def adapters(simulator: Simulator) -> dict[str, Adapter]:
    """One adapter of each API, by its `name`."""
    return {cls.name: cls(simulator) for cls in ADAPTERS}
