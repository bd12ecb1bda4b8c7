"""What an injected fault does to one request's plan and stream (chosen by `llmsim.faults.catalogue`).

`Injection.shape(plan)` cuts the answer for a content filter (Responses: `incomplete` with
reason content_filter; Chat: finish_reason content_filter). `Injection.events(template, **ctx)`
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
from llmsim.pacing.draining import DRAIN
from llmsim.render import sse
from llmsim.render.templates import Event, MarkedEvent, Template
from llmsim.sim import contentfaults


class Injector(Protocol):
    """What an injection needs of the injector that chose it (llmsim.faults.catalogue.FaultInjector)."""
    clock: Any
    settings: Any
    tails: Template

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
        `ctx` is the request's planning context (llmsim.sim.plan.Context)."""
        if self.fault is None or self.fault.kind.effect not in contentfaults.ANSWERS:
            return answer
        return contentfaults.spoiled(self.fault.kind.effect, answer, body, self.api, ctx.rng,
                                     self.fault.kind.message)

    def shape(self, plan):
        """The plan, cut by a content filter after k tokens, or cut in half (truncated_output),
        when that is the fault."""
        effect = None if self.fault is None else self.fault.kind.effect
        if effect == "truncated_output":
            if hasattr(plan, "truncated"):  # a plan that knows how it is cut short (Anthropic's)
                plan.truncated()
                return plan
            truncate = _truncate_chat if hasattr(plan, "choices") else _truncate_response   # Chat, Gemini / Responses
            truncate(plan, self.injector.settings.usage)
            return plan
        if effect != "content_filter":
            return plan
        if hasattr(plan, "filtered"):       # a plan that knows how a filter stops it (Anthropic's)
            plan.filtered(self.after_tokens)
            return plan
        cut = _cut_chat if hasattr(plan, "choices") else _cut_response    # Chat, Gemini / Responses
        cut(plan, self.after_tokens, self.injector.settings.usage)
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
        seq = 0
        for event in events:
            if DRAIN.ended:
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
        """`frames`, until the server shuts down (llmsim.pacing.draining): then, instead of the
        rest, the tail of a mid-stream failure (templates/faults.yaml) with `SHUTDOWN`'s error:
        `response.failed` (Responses), an error frame (Responses WebSocket, whose socket the
        server closes next), Chat's error chunk and `[DONE]`, Anthropic's and Gemini's error
        events. A WebSocket response ends as the shutdown begins (the server closes its
        socket at once), every other stream when the graceful timeout is (nearly) over."""
        websocket = self.api == "websocket"
        count = at = 0.0
        for at, frame in frames:
            if DRAIN.begun and (websocket or DRAIN.ended):
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


def _cut_calls(calls, semantics: str) -> int:
    """The last call's arguments cut in half (status incomplete); the output tokens left."""
    call = calls[-1]
    keep = len(call.pieces) // 2
    call.tokens -= len(call.pieces) - keep
    call.pieces = call.pieces[:keep]
    call.fragments = call.fragments[:keep]
    call.arguments = "".join(call.pieces)
    call.status = "incomplete"
    if call.fragments:
        call.end_at = call.fragments[-1].at
    return sum(c.tokens for c in calls)


def _truncate_response(plan, semantics: str) -> None:
    """A Responses plan cut mid-value: incomplete, reason max_output_tokens."""
    messages = [item for item in plan.output if item.kind in ("message", "refusal")]
    calls = [item for item in plan.output if item.kind == "function_call"]
    visible = 0
    for item in messages:
        item.keep(len(item.pieces) // 2)
        item.status = "incomplete"
        visible += len(item.pieces)
        if item.times:
            plan.end_at = item.times[-1]
    if calls:
        visible += _cut_calls(calls, semantics)
        plan.end_at = calls[-1].end_at
    plan.status, plan.incomplete_reason = "incomplete", "max_output_tokens"
    plan.usage = _usage(plan.usage, visible, semantics)


def _truncate_chat(plan, semantics: str) -> None:
    """A Chat plan whose choices are cut mid-value, finish_reason length."""
    for choice in plan.choices:
        if choice.tool_calls:
            choice.visible_tokens = _cut_calls(choice.tool_calls, semantics)
            choice.end_at = choice.tool_calls[-1].end_at
        else:
            choice.keep(len(choice.pieces) // 2)
            if choice.refusal is not None:
                choice.text, choice.refusal = None, choice.text
            choice.visible_tokens = len(choice.pieces)
            choice.end_at = choice.times[-1] if choice.times else choice.first_at
        choice.finish_reason = "length"
    plan.replan_chunks()
    plan.end_at = max(choice.end_at for choice in plan.choices)
    plan.usage = _usage(plan.usage, sum(c.visible_tokens for c in plan.choices), semantics)


def _cut_response(plan, k: int, semantics: str) -> None:
    """A Responses plan whose message stops after k tokens: incomplete, reason content_filter."""
    visible = 0
    for item in plan.output:
        if item.kind == "message":
            item.keep(k)
            item.status = "incomplete"
            visible += len(item.pieces)
            if item.times:
                plan.end_at = item.times[-1]
    plan.status, plan.incomplete_reason = "incomplete", "content_filter"
    plan.usage = _usage(plan.usage, visible, semantics)


def _usage(usage, visible: int, semantics: str):
    from llmsim.sim.plan import Usage
    new = Usage.make(usage.input_tokens, visible, usage.reasoning_tokens, semantics)
    new.cached_tokens = usage.cached_tokens
    return new


def _cut_chat(plan, k: int, semantics: str) -> None:
    """A Chat plan whose choices stop after k tokens with finish_reason content_filter."""
    for choice in plan.choices:
        if choice.text is not None:
            choice.keep(k)
            choice.visible_tokens = len(choice.pieces)
            choice.end_at = choice.times[-1] if choice.times else choice.first_at
        choice.finish_reason = "content_filter"
    plan.replan_chunks()
    plan.end_at = max(choice.end_at for choice in plan.choices)
    plan.usage = _usage(plan.usage, sum(c.visible_tokens for c in plan.choices), semantics)
