"""POST /responses (stored, chained, in a conversation or in the background: llmsim.state.responses)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.api import answer, ratelimiting
from llmsim.pacing import transport
from llmsim.sim import inputs
from llmsim.sim import plan as planning
from llmsim.simulator import Simulator
from llmsim.state.responses import Replay, wants_store

if TYPE_CHECKING:   # a type only
    from llmsim.api.current import Current


class ResponsesHandlers:
    def __init__(self, sim: Simulator, current: Current):
        self.sim = sim
        self.received_at, self.request_headers = current.received_at, current.request_headers
        self.template = sim.templates["responses"]

    async def create(self, body: dict):
        sim = self.sim
        start = sim.clock.began(self.received_at())
        sim.refresh()                   # settings changed at runtime by another process
        if sim.replay is not None and (replayed := await sim.replay.answer("responses", body, start)) is not None:
            return replayed
        headers = self.request_headers()
        script = prior = None
        if sim.scripts.wanted(body, headers):      # a scenario or a rule may script it
            prior = sim.state.known_prior(body) or await sim.state.prior(body)
            turns = [*prior.turns, *inputs.responses_turns(body)]
            fault, script = await sim.scripts.begin("responses", body, headers, turns)
        else:
            fault = sim.faults.begin("responses", body, headers)
        if fault.waits:                 # a timeout's error, or what a shared schedule decides
            fault = await fault.wait()
        # previous_response_id / conversation history (none: known at once)
        prior = prior or sim.state.known_prior(body) or await sim.state.prior(body)
        ctx = sim.context(body["model"], headers)
        if fault:                       # a content fault changes what is said
            script = fault.answer(script, body, ctx)
        plan = planning.plan_response(body, ctx, prior.turns, script=script)
        if sim.limiter.limits is not None:      # rate limits: take its cost, or 429
            await ratelimiting.take(sim, ctx.model, plan.usage.input_tokens, body.get("max_output_tokens"))
        if fault:                       # (a request with no fault calls none of it)
            plan = fault.shape(plan)
        ticket = admission = None       # the serving model's (llmsim.state.serving), when on
        if (serving := answer.serving(sim, ctx.profile)) is not None:     # a slot, or a place in the queue
            admission = sim.serving.enter(serving, plan, body.get("prompt_cache_key"),
                                          [*(prior.turns or ()), *inputs.responses_turns(body)],
                                          ctx.model.encoding, start)
            if not body.get("background"):      # (a background job waits for its turn itself)
                ticket = await admission.ticket()
        store = wants_store(body)
        own = sim.state.input_items(body, ctx.rng) if store else []
        sim.stats.record(plan, "responses", bool(body.get("stream")), ticket.delay if ticket is not None else 0.0)
        if body.get("background"):
            events = fault.marked(self.template, plan=plan, req=body)   # (the job reads their roles)
            job, queued = await sim.state.jobs.start(body, prior, own, events, start, admission)
            return transport.SSEResponse(job.follow(-1)) if body.get("stream") else transport.json_response(queued)
        if body.get("stream"):
            chunks = answer.events(sim, fault.frames(self.template, plan=plan, req=body), start, ticket)
            if store:                   # a stream no fault cut can be rendered again when read
                replay = None if fault.cuts_stream else Replay(self.template, plan, body)
                chunks = sim.state.recorded(chunks, body, prior, own, replay)
            return transport.SSEResponse(chunks)
        await answer.wait(sim, plan, start, ticket)
        content = self.template.body_json(plan=plan, req=body)
        if store:                                           # the store keeps these bytes
            if not sim.state.saved_now(body, prior, own, content, plan):
                await sim.state.save(body, prior, own, content, plan=plan)
            if prior.conversation:                          # its items join the conversation
                await sim.state.conclude(body, prior, own, content)
        return transport.json_response(content)
