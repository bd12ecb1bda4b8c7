"""One pipeline for every generating request: the same ordered stages for every API (refresh,
replay, script, prior, plan, admit, shape, slot, observe, deliver), each API's difference
stated by its adapter (llmsim.api.adapters), never by leaving a stage out.

Invariant: the stages are assembled from the settings (`assemble`, again when PATCH
/llmsim/config, another process or POST /llmsim/faults changes them) into one straight-line
coroutine per adapter (`Lane`, written as code the way llmsim.render writes templates); a
capability that is off has no line in it, so it costs nothing. What each stage does and the
code a lane is: docs/internals.md#apipipeline.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Callable, Mapping

from llmsim.faults.catalogue import HEADER as FAULT_HEADER
from llmsim.faults.injection import NO_FAULT
from llmsim.observe.stats import CURRENT
from llmsim.sim.scenarios import HEADER as SCENARIO_HEADER
from llmsim.simulator import SEED_HEADER

if TYPE_CHECKING:   # types only
    from llmsim.simulator import Simulator

Adapter = Any       # an llmsim.api.adapters.Adapter (which imports this module's Call)

CONTROL = tuple((name, name.encode()) for name in (FAULT_HEADER, SCENARIO_HEADER, SEED_HEADER))
(_, FAULT), (_, SCENARIO), (_, SEED) = CONTROL
CONTROLLING = frozenset(raw for _, raw in CONTROL)
KEY_HEADERS = (b"x-api-key", b"x-goog-api-key")     # Anthropic's and Gemini's, besides Authorization


def control(headers: Mapping[bytes, bytes] | None) -> dict[str, str] | None:
    """The llmsim headers a request carries ({name: value}), None for none (most requests)."""
    if not headers or CONTROLLING.isdisjoint(headers):
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
    """One request on its way through the stages: made as `Call(adapter, req, headers,
    control, start)`; what a stage has not set yet is None."""
    __slots__ = ("adapter", "req", "headers", "control", "start",
                 "prior", "fault", "ctx", "plan", "ticket", "admission", "added", "extra")

    def __init__(self, adapter: Adapter, req: dict, headers: Mapping[bytes, bytes] | None,
                 control: dict[str, str] | None, start: float):
        self.adapter, self.req, self.headers, self.control, self.start = adapter, req, headers, control, start
        self.prior = self.fault = self.ctx = self.plan = self.ticket = self.admission = self.added = \
            self.extra = None


class Lane:
    """One adapter's stages as assembled: `answer(req, received_at)` (an HTTP request, its
    response) and `run(call)` (every stage but delivery: a WebSocket turn's); `source` is
    their code."""
    answer: Callable
    run: Callable
    source: str


class Pipeline:
    def __init__(self, simulator: Simulator):
        self.simulator = simulator
        self.lanes: dict[Adapter, Lane] = {}
        self.handlers: list = []        # (handler, adapter): `handler.received` is its lane's answer
        simulator.reconfigured.append(self.assemble)
        simulator.faults.changed.append(self.assemble)
        self.assemble()

    def assemble(self, *_: Any) -> None:
        """Which stages run, from the settings now in force; each adapter's lane written again."""
        simulator = self.simulator
        self.refresh = simulator.live.refresh if simulator.live.watches else None
        self.replay = simulator.replay
        self.limiter = simulator.limiter if simulator.limiter.limits is not None else None
        simulator.serving.refresh(simulator.settings)
        self.serving = simulator.serving if simulator.serving.on else None
        self.scripts = simulator.scripts
        scenarios = simulator.scripts.scenarios       # every request may be scripted (else: one that asks)
        self.scripted = bool(scenarios.rules) or scenarios.default is not None
        faults = simulator.faults       # nothing can fire without a fault header (no draw)
        self.quiet = faults.shared is None and not faults.schedule and not faults.rates
        for adapter in self.lanes:
            self.lanes[adapter] = self.write(adapter)
        for handler, adapter in self.handlers:
            handler.received = self.lane(adapter).answer

    def lane(self, adapter: Adapter) -> Lane:
        lane = self.lanes.get(adapter)
        if lane is None:
            lane = self.lanes[adapter] = self.write(adapter)
        return lane

    def attach(self, handler, adapter: Adapter) -> None:
        """Make `handler.received(req, received_at)` the adapter's lane's answer, now and
        after every assembly (llmsim.api.handlers.generate)."""
        self.handlers.append((handler, adapter))
        handler.received = self.lane(adapter).answer

    # ---- HTTP ----------------------------------------------------------------------------
    def answer(self, adapter: Adapter, req: dict, received_at: float | None):
        """The response to one HTTP request of `adapter`'s API (an awaitable)."""
        return self.lane(adapter).answer(req, received_at)

    def run(self, call: Call):
        """Script, prior, plan, admit, shape, slot and observe `call` (everything but delivery)."""
        return self.lane(call.adapter).run(call)

    # ---- the lanes -------------------------------------------------------------------------
    def write(self, adapter: Adapter) -> Lane:
        """`adapter`'s lane: the stages on for it under the settings now in force, as code."""
        source = "\n".join([
            "async def answer(req, received_at):",
            *_indent(self._start(adapter)),
            "    ex = CURRENT.get()              # (llmsim.observe.stats.current)",
            "    headers = ex.request_headers if ex is not None else None",
            # (three `in` tests cost half of CONTROLLING.isdisjoint(headers), which walks every header)
            "    ctrl = control(headers) if headers and (" + " or ".join(f"{raw!r} in headers" for _, raw in CONTROL)
            + ") else None",
            "    call = Call(adapter, req, headers, ctrl, start)",
            *_indent(self._stages(adapter)),
            *(["    response = await adapter.deliver(call)",
               "    if call.added:                  # the rate limits' headers",
               "        response.raw_headers = [*response.raw_headers, *call.added]",
               "    return response"] if self.limiter is not None else
              ["    return await adapter.deliver(call)"]),
            "",
            "async def run(call):",
            "    req, ctrl = call.req, call.control",
            *_indent(self._stages(adapter)),
            ""])
        simulator = self.simulator
        namespace = dict(
            adapter=adapter, pipeline=self, simulator=simulator, clock=simulator.clock, now=simulator.clock.now,
            refresh=self.refresh, replay=self.replay, scripts=self.scripts, faults=simulator.faults,
            record=simulator.stats.record, context=simulator.context, CURRENT=CURRENT, control=control, Call=Call,
            FAULT_HEADER=FAULT_HEADER, NO_FAULT=NO_FAULT,
            Coroutine=types.CoroutineType, plan_of=adapter.plan, planner=adapter.planner, prior_of=adapter.prior)
        exec(compile(source, f"<lane {adapter.name}>", "exec"), namespace)
        lane = namespace["LANE"] = Lane()
        lane.answer, lane.run, lane.source = namespace["answer"], namespace["run"], source
        return lane

    def _start(self, adapter: Adapter) -> list[str]:
        """The request's simulated start, settings another process changed, a recorded answer."""
        if self.simulator.clock.realtime:       # Clock.request_start, written out
            lines = ["start = now()",
                     "if received_at is not None and received_at < start:",
                     "    start = received_at"]
        else:
            lines = ["start = clock.request_start(received_at)"]
        if self.refresh is not None:    # (may reassemble: the request goes on in the new lane)
            lines += ["refresh()",
                      "if pipeline.lanes.get(adapter) is not LANE:",
                      "    return await pipeline.answer(adapter, req, start)"]
        if self.replay is not None and adapter.replays:
            lines += ["replayed = await replay.answer(adapter.name, req, start)",
                      "if replayed is not None:",
                      "    return replayed"]
        return lines

    def _stages(self, adapter: Adapter) -> list[str]:
        """script, prior, plan, admit, shape, slot and observe, on `call` (with `req`, `ctrl`)."""
        lines = self._decided(adapter) + self._planned(adapter)
        serves = self.serving is not None and adapter.serves
        if adapter.marks or serves:
            lines.append("await pipeline.slot(call, plan, ctx)")
        if adapter.records:             # (a WebSocket turn is counted as it is sent)
            delay = ", call.ticket.delay if call.ticket is not None else 0.0" if serves else ""   # (no delay)
            lines.append(f"record(plan, {adapter.endpoint!r}, bool(req.get('stream')){delay})")
        return lines

    def _unfaulted(self, adapter: Adapter) -> str:
        """A request no fault fired for (FaultInjector.unfaulted): NO_FAULT, unless a shutdown
        may have to end its stream (`stops`)."""
        if self.simulator.faults.stops(adapter.name):
            return f"faults.unfaulted({adapter.name!r}, req)"
        return "NO_FAULT"

    def _decided(self, adapter: Adapter) -> list[str]:
        """The script stage (a scenario or a rule), else the faults': `fault` and `script`."""
        name = repr(adapter.name)
        if self.quiet:                  # no schedule, no rates: only a fault header may fire
            faults = ["if ctrl is None or FAULT_HEADER not in ctrl:      # nothing can fire",
                      "    faults.requests += 1",
                      f"    fault = {self._unfaulted(adapter)}",
                      "else:",
                      f"    fault = faults.begin({name}, req, ctrl)",
                      "    if fault.waits:",
                      "        fault = await fault.wait()"]
        else:
            faults = [f"fault = faults.begin({name}, req, ctrl)",
                      "if fault.waits:                 # a timeout's error, or what a shared schedule decides",
                      "    fault = await fault.wait()"]
        lines = ["script = None"]
        if adapter.scripts:             # a scenario or a rule may script it
            asks = "" if self.scripted else '(ctrl is not None or "metadata" in req) and '
            lines += [f"if {asks}scripts.wanted(req, ctrl) and adapter.scriptable(call):",
                      *(_indent(_prior()) if adapter.history else []),
                      f"    fault, script = await scripts.begin({name}, req, ctrl, adapter.turns(call))",
                      "    if fault.waits:",
                      "        fault = await fault.wait()",
                      "else:",
                      *_indent(faults)]
        else:
            lines += faults
        return [*lines, "call.fault = fault"]

    def _planned(self, adapter: Adapter) -> list[str]:
        """prior, plan, admit and shape."""
        lines = ["if call.prior is None:", *_indent(_prior())] if adapter.history else []   # what it continues
        context = "context(req['model'], ctrl)" if _default(adapter, "context") else "adapter.context(req, ctrl)"
        lines += [f"ctx = call.ctx = {context}",
                  "faulted = fault.fault is not None",
                  "if faulted:                     # a content fault changes what is said",
                  "    script = fault.answer(script, req, ctx)",
                  "plan = call.plan = " + ("plan_of(call, ctx, script)" if adapter.planner is None else
                                           "planner(req, ctx, script)")]
        if self.limiter is not None:    # its cost, or 429
            lines.append("call.added = await pipeline.take(call, ctx.model, plan)")
        return [*lines, "if faulted:", "    plan = call.plan = fault.shape(plan)"]

    # ---- stages too rare to be written into a lane -----------------------------------------
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
        if self.limiter is None:        # (limits turned off while the request waited in an older lane)
            return None
        adapter = call.adapter
        max_output, choices = adapter.cost(call.req)
        cost = plan.usage.input_tokens
        if adapter.generates:
            cost += (max_output if max_output is not None else model.max_output_tokens) * choices
        return await self.limiter.take(api_key(call.headers), model.id, cost, adapter.provider)


def _prior() -> list[str]:
    """The prior stage: the adapter's `prior` (a coroutine when the store must be read)."""
    return ["prior = prior_of(call)",
            "if prior.__class__ is Coroutine:",
            "    prior = await prior",
            "call.prior = prior"]


def _default(adapter: Adapter, method: str) -> bool:
    """Whether `adapter` keeps the base Adapter's `method` (its own: defined in a subclass)."""
    return getattr(type(adapter), method).__qualname__ == f"Adapter.{method}"


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]
