"""What an injected fault does to one request's plan and stream (chosen by `llmsim.faults.catalogue`).

`Injection.shape(plan)` cuts the answer for a content filter or a truncated output, through
the plan's own `cut` / `truncate` (llmsim.sim.plans.Plan: each API's own words). `Injection.events(template, **ctx)`
(and `Injection.frames`, the same as SSE frames) renders the template's stream and passes it
through until k tokens have gone out, then sends the fault's tail from templates/faults.yaml
instead of the rest (`response.failed`, an `error` event, a WebSocket error frame, or Chat's
`data: {"error": ...}` + `[DONE]`), or raises `ConnectionDrop`. What is a token and what ends
the answer is what the template's steps declare (`delta`, `terminal`: `Template.marked`),
never an event's name. `NO_FAULT` hands everything back unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Protocol

from llmsim.errors import ConnectionDrop, ServerError
from llmsim.faults.kinds import Fault
from llmsim.pacing.draining import Drain
from llmsim.render import sse
from llmsim.render.templates import Event, MarkedEvent, Template
from llmsim.sim import contentfaults


class Injector(Protocol):
    """What an injection needs of the injector that chose it (llmsim.faults.catalogue.FaultInjector)."""
    clock: Any
    tails: Template
    drain: Drain        # the app's shutdown, which ends the streams it `stops`

    def stops(self, api: str) -> bool: ...

    def error(self, fault: Fault, api: str, body: Mapping[str, Any]) -> Exception: ...


@dataclass
class Injection:
    """What one request's fault does to its plan and stream; `NO_FAULT` does nothing."""
    injector: Injector | None = None
    fault: Fault | None = None
    api: str = ""
    body: Mapping[str, Any] = field(default_factory=dict)
    waits: bool = False         # `fault = await fault.wait()` comes first

    def __bool__(self) -> bool:
        return self.fault is not None

    async def wait(self) -> "Injection":
        """A timeout fault: its error, once the timeout has passed. No fault yet: the one a
        shared store's schedule decides (raised, waited for or returned, as `begin` would)."""
        injector, fault = self.injector, self.fault
        if fault is None:
            decided = injector.apply(await injector.pick_shared(), self.api, self.body)
            return await decided.wait() if decided.waits else decided
        await injector.clock.sleep_until(injector.clock.now() + fault.timeout_after_ms / 1000)
        raise injector.error(fault, self.api, self.body)

    @property
    def after_tokens(self) -> int:
        fault = self.fault
        return fault.after_tokens if fault.after_tokens is not None else (fault.kind.after_tokens or 0)

    def answer(self, answer, body: Mapping[str, Any], ctx):
        """What a content fault says instead of `answer` (a scenario's, or None: generated);
        `ctx` is the request's planning context (llmsim.sim.responses_plan.Context)."""
        if self.fault is None or self.fault.kind.effect not in contentfaults.ANSWERS:
            return answer
        return contentfaults.spoiled(self.fault.kind.effect, answer, body, self.api, ctx.rng,
                                     self.fault.kind.message)

    def shape(self, plan):
        """The plan (llmsim.sim.plans.Plan), cut by a content filter after k tokens, or cut in
        half (truncated_output), when that is the fault: each plan cuts itself in its API's words."""
        effect = None if self.fault is None else self.fault.kind.effect
        if effect == "truncated_output":
            plan.truncate()
        elif effect == "content_filter":
            plan.cut(self.after_tokens)
        return plan

    @property
    def cuts_stream(self) -> bool:
        """The stream ends early (every fault but none, a content filter's and the content faults)."""
        return self.fault is not None and self.fault.kind.effect not in CONTENT

    def events(self, template: Template, **ctx) -> Iterable[Event]:
        """`template`'s stream rendered with `ctx`, ending after k tokens with the fault's
        tail (or a dropped connection)."""
        if not self.cuts_stream:
            return template.events(**ctx)
        return self._cut(template.marked(**ctx), ctx)

    def marked(self, template: Template, **ctx) -> Iterable[MarkedEvent]:
        """`events`, each with the role its step declares (`Template.marked`); as `frames`,
        ended by a shutdown's graceful timeout (a background response's)."""
        events = template.marked(**ctx) if not self.cuts_stream else self._cut(template.marked(**ctx), ctx)
        if self.injector is None or not self.injector.stops(self.api):
            return events
        return self._stoppable_marked(events, ctx)

    def _stoppable_marked(self, events: Iterator[MarkedEvent], ctx: dict) -> Iterator[MarkedEvent]:
        """`events` until the graceful timeout of a shutdown is (nearly) over, then the
        tail of a mid-stream failure, as `_stoppable` ends frames."""
        seq, drain = 0, self.injector.drain
        for event in events:
            if drain.ended:
                break
            yield event
            seq += not event.raw
        else:
            return
        events.close()
        yield from self._shutdown_tail(ctx, seq)

    def frames(self, template: Template, **ctx) -> Iterator[tuple[float, bytes]]:
        """`template`'s stream rendered with `ctx` as SSE (`Template.frames`), as `events` cuts it;
        ended by a shutdown when the injector `stops` this API's streams (`_stoppable`)."""
        frames = template.frames(**ctx) if not self.cuts_stream else sse.framed(
            self._cut(template.marked(**ctx), ctx))
        if self.injector is None or not self.injector.stops(self.api):
            return frames
        return self._stoppable(frames, ctx)

    def _stoppable(self, frames: Iterator[tuple[float, bytes]], ctx: dict) -> Iterator[tuple[float, bytes]]:
        """`frames`, until the app's server shuts down (llmsim.pacing.draining): then, instead of the
        rest, the tail of a mid-stream failure (templates/faults.yaml) with `SHUTDOWN`'s error:
        `response.failed` (Responses), an error frame (Responses WebSocket, whose socket the
        server closes next), Chat's error chunk and `[DONE]`, Anthropic's and Gemini's error
        events. A WebSocket response ends as the shutdown begins (the server closes its
        socket at once), every other stream when the graceful timeout is (nearly) over."""
        websocket, drain = self.api == "websocket", self.injector.drain
        count = at = 0.0
        for at, frame in frames:
            if drain.begun and (websocket or drain.ended):
                break
            yield at, frame
            count += 1
        else:
            return
        frames.close()
        for event in self._shutdown_tail(ctx, int(count)):
            yield at, sse.frame(event)

    def _shutdown_tail(self, ctx: dict, first_seq: int) -> Iterator[MarkedEvent]:
        effect = "stream_error" if self.api == "websocket" else "stream_failed"
        return self.injector.tails.marked(api=self.api, effect=effect, error=ServerError(SHUTDOWN, status=503),
                                          first_seq=first_seq, **ctx)

    def _cut(self, events: Iterator[MarkedEvent], ctx: dict) -> Iterator[MarkedEvent]:
        limit, tokens, seq = self.after_tokens, 0, 0
        for event in events:
            role = event.role
            if role.delta:
                if tokens >= limit:
                    break
                tokens += 1
            elif role.terminal:
                break
            yield event
            seq += not event.raw
        effect = self.fault.kind.effect
        if effect == "stream_drop":
            raise ConnectionDrop()
        error = self.injector.error(self.fault, self.api, self.body)
        yield from self.injector.tails.marked(api=self.api, effect=effect, error=error, first_seq=seq, **ctx)


NO_FAULT = Injection()
SHUTDOWN = "The server is shutting down; the response was ended before it finished. Please retry."
# Effects that change the answer, not its delivery (the stream ends as usual).
CONTENT = ("content_filter", "truncated_output", *contentfaults.ANSWERS)

