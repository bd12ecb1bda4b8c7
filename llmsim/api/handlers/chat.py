"""POST /chat/completions (kept in the store with `store: true`: llmsim.state.chats)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.api import answer, ratelimiting
from llmsim.pacing import transport
from llmsim.sim import chatplan, inputs
from llmsim.simulator import Simulator
from llmsim.state.chats import ChatStore

if TYPE_CHECKING:   # a type only
    from llmsim.api.current import Current


class ChatHandlers:
    def __init__(self, sim: Simulator, current: Current):
        self.sim = sim
        self.received_at, self.request_headers = current.received_at, current.request_headers
        self.template = sim.templates["chat"]
        self.stored = ChatStore(sim)

    async def create(self, body: dict):
        sim = self.sim
        start = sim.clock.began(self.received_at())
        sim.refresh()                   # settings changed at runtime by another process
        if sim.replay is not None and (replayed := await sim.replay.answer("chat", body, start)) is not None:
            return replayed
        headers = self.request_headers()
        script = None
        if sim.scripts.wanted(body, headers):      # a scenario or a rule may script it
            turns = inputs.chat_turns(body["messages"])
            fault, script = await sim.scripts.begin("chat", body, headers, turns)
        else:
            fault = sim.faults.begin("chat", body, headers)
        if fault.waits:                 # a timeout's error, or what a shared schedule decides
            fault = await fault.wait()
        ctx = sim.context(body["model"], headers)
        if fault:                       # a content fault changes what is said
            script = fault.answer(script, body, ctx)
        plan = chatplan.plan_chat(body, ctx, script)
        if sim.limiter.limits is not None:      # rate limits: take its cost, or 429
            cap = body.get("max_completion_tokens")
            await ratelimiting.take(sim, ctx.model, plan.usage.input_tokens,
                                    body.get("max_tokens") if cap is None else cap, body.get("n") or 1)
        if fault:                       # (a request with no fault calls none of it)
            plan = fault.shape(plan)
        ticket = None                   # the serving model's (llmsim.state.serving), when on
        if (serving := answer.serving(sim, ctx.profile)) is not None:
            ticket = await sim.serving.admit(serving, plan, body.get("prompt_cache_key"),
                                             inputs.chat_turns(body["messages"]), ctx.model.encoding, start)
        sim.stats.record(plan, "chat", bool(body.get("stream")), ticket.delay if ticket is not None else 0.0)
        if body.get("stream"):
            if body.get("store") and not fault.cuts_stream:     # the completion the stream makes
                await self.stored.save(body, self.template.body_json(plan=plan, req=body))
            return transport.SSEResponse(answer.events(sim, fault.frames(self.template, plan=plan, req=body),
                                                       start, ticket))
        await answer.wait(sim, plan, start, ticket)
        content = self.template.body_json(plan=plan, req=body)
        if body.get("store"):
            await self.stored.save(body, content)
        return transport.json_response(content)
