"""One pipeline for every generating request: the same ordered stages for every API (refresh,
replay, script, prior, plan, admit, shape, slot, observe, deliver), each API's difference
stated by its adapter (llmsim.api.adapters), never by leaving a stage out.

Invariant: the stages are assembled from the settings (`assemble`, again when PATCH
/llmsim/config or another process changes them); a capability that is off has no stage, so it
costs nothing. What each stage does: docs/internals.md#apipipeline and docs/architecture.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from llmsim.faults.catalogue import HEADER as FAULT_HEADER
from llmsim.observe.stats import current
from llmsim.sim.scenarios import HEADER as SCENARIO_HEADER
from llmsim.simulator import SEED_HEADER

if TYPE_CHECKING:   # types only
    from llmsim.simulator import Simulator

Adapter = Any       # an llmsim.api.adapters.Adapter (which imports this module's Call)

CONTROL = tuple((name, name.encode()) for name in (FAULT_HEADER, SCENARIO_HEADER, SEED_HEADER))
(_, FAULT), (_, SCENARIO), (_, SEED) = CONTROL
KEY_HEADERS = (b"x-api-key", b"x-goog-api-key")     # Anthropic's and Gemini's, besides Authorization


def control(headers: Mapping[bytes, bytes] | None) -> dict[str, str] | None:
    """The llmsim headers a request carries ({name: value}), None for none (most requests)."""
    if not headers or (FAULT not in headers and SCENARIO not in headers and SEED not in headers):
        return None
    return {name: value.decode("latin-1") for name, raw in CONTROL if (value := headers.get(raw)) is not None}


def api_key(headers: Mapping[bytes, bytes] | None) -> str:
    """The API key a request sends (`Authorization: Bearer`, `x-api-key`, `x-goog-api-key`), "" for none."""
    if not headers:
        return ""
    auth = headers.get(b"authorization")
    if auth:
        scheme, _, token = auth.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer":
            return token.strip()
    for name in KEY_HEADERS:
        if (value := headers.get(name)):
            return value.decode("latin-1").strip()
    return ""


class Call:
    """One request on its way through the stages (what a stage has not set yet: None)."""
    prior = fault = ctx = plan = ticket = admission = added = extra = None
    # (no __slots__: the stages' results default to these class attributes, not set per call)

    def __init__(self, adapter: Adapter, req: dict, headers, ctrl, start: float):
        self.adapter, self.req, self.headers, self.control, self.start = adapter, req, headers, ctrl, start


class Pipeline:
    def __init__(self, simulator: Simulator):
        self.simulator = simulator
        simulator.reconfigured.append(self.assemble)
        self.assemble()

    def assemble(self, *_: Any) -> None:
        """Which stages run, from the settings now in force."""
        simulator = self.simulator
        self.refresh = simulator.live.refresh if simulator.live.watches else None
        self.replay = simulator.replay
        self.limiter = simulator.limiter if simulator.limiter.limits is not None else None
        simulator.serving.refresh(simulator.settings)
        self.serving = simulator.serving if simulator.serving.on else None
        self.scripts = simulator.scripts
        scenarios = simulator.scripts.scenarios       # every request may be scripted (else: one that asks)
        self.scripted = bool(scenarios.rules) or scenarios.default is not None

    # ---- HTTP ----------------------------------------------------------------------------
    async def answer(self, adapter: Adapter, req: dict, received_at: float | None):
        """The response to one HTTP request of `adapter`'s API."""
        simulator = self.simulator
        start = simulator.clock.request_start(received_at)
        if self.refresh is not None:
            self.refresh()              # (may reassemble the stages)
        if self.replay is not None and adapter.replays and \
                (replayed := await self.replay.answer(adapter.name, req, start)) is not None:
            return replayed
        ex = current()
        headers = ex.request_headers if ex is not None else None
        call = Call(adapter, req, headers, control(headers), start)
        await self.run(call)
        response = await adapter.deliver(self, call)
        if call.added:
            response.raw_headers = [*response.raw_headers, *call.added]
        return response

    # ---- the stages every API shares -------------------------------------------------------
    async def run(self, call: Call) -> None:
        """Script, prior, plan, admit, shape, slot and observe `call` (everything but delivery)."""
        simulator, adapter, req, ctrl = self.simulator, call.adapter, call.req, call.control
        script = None
        if adapter.scripts and (self.scripted or ctrl is not None or "metadata" in req) and \
                self.scripts.wanted(req, ctrl) and adapter.scriptable(call):   # a scenario or a rule may script it
            call.prior = await adapter.prior(call) if adapter.history else None
            fault, script = await self.scripts.begin(adapter.name, req, ctrl, adapter.turns(call))
        else:
            fault = simulator.faults.begin(adapter.name, req, ctrl)
        if fault.waits:                 # a timeout's error, or what a shared schedule decides
            fault = await fault.wait()
        call.fault = fault
        if adapter.history and call.prior is None:     # what it continues (none: known at once)
            call.prior = await adapter.prior(call)
        ctx = call.ctx = adapter.context(req, ctrl)
        faulted = fault.fault is not None
        if faulted:                     # a content fault changes what is said
            script = fault.answer(script, req, ctx)
        plan = call.plan = adapter.plan(call, ctx, script)
        if self.limiter is not None:    # its cost, or 429
            call.added = await self.take(call, ctx.model, plan)
        if faulted:
            plan = call.plan = fault.shape(plan)
        if adapter.marks or (self.serving is not None and adapter.serves):
            await self.slot(call, plan, ctx)
        if adapter.records:             # (a WebSocket turn is counted as it is sent)
            ticket = call.ticket
            simulator.stats.record(plan, adapter.endpoint, bool(req.get("stream")), ticket.delay if ticket is not None else 0.0)

    async def slot(self, call: Call, plan, ctx) -> None:
        """The serving model's slot or place in the queue, prefill and prefix cache (where it is
        on), or the prefix cache's marked prefixes only (Anthropic's `cache_control`)."""
        adapter, req = call.adapter, call.req
        params = None
        if self.serving is not None and adapter.serves:
            params = self.serving.params(self.simulator.settings, ctx.profile)
        if adapter.marks and (params is None or not params.prefix_cache):     # marked prefixes only
            await adapter.read_marks(call, self.simulator.serving.cache)
        if params is not None:          # a slot or a place in the queue, prefill, the prefix cache
            call.admission = self.serving.enter(params, plan, adapter.cache_key(req), adapter.cache_turns(call),
                                                ctx.model.encoding, call.start)
            if not adapter.deferred(req):       # (a background job waits for its turn itself)
                call.ticket = await call.admission.ticket()

    async def take(self, call: Call, model, plan) -> list | None:
        """Take the request's cost from its rate limits: the headers the answer carries (None:
        no limit for its key and model); raises RateLimited when a bucket is short."""
        adapter = call.adapter
        max_output, choices = adapter.cost(call.req)
        cost = plan.usage.input_tokens
        if adapter.generates:
            cost += (max_output if max_output is not None else model.max_output_tokens) * choices
        return await self.limiter.take(api_key(call.headers), model.id, cost, adapter.provider)
