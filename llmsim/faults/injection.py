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

from llmsim.errors import ConnectionDrop
from llmsim.faults.kinds import Fault
from llmsim.render import sse
from llmsim.render.templates import Event, MarkedEvent, Template


class Injector(Protocol):
    """What an injection needs of the injector that chose it (llmsim.faults.catalogue.FaultInjector)."""
    clock: Any
    settings: Any
    tails: Template

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

    def shape(self, plan):
        """The plan, cut by a content filter after k tokens when that is the fault."""
        if self.fault is None or self.fault.kind.effect != "content_filter":
            return plan
        cut = _cut_chat if hasattr(plan, "choices") else _cut_response    # Chat, Gemini / Responses
        cut(plan, self.after_tokens, self.injector.settings.usage)
        return plan

    @property
    def cuts_stream(self) -> bool:
        """The stream ends early (every fault but none and a content filter's)."""
        return self.fault is not None and self.fault.kind.effect != "content_filter"

    def events(self, template: Template, **ctx) -> Iterable[Event]:
        """`template`'s stream rendered with `ctx`, ending after k tokens with the fault's
        tail (or a dropped connection)."""
        if not self.cuts_stream:
            return template.events(**ctx)
        return self._cut(template.marked(**ctx), ctx)

    def marked(self, template: Template, **ctx) -> Iterable[MarkedEvent]:
        """`events`, each with the role its step declares (`Template.marked`)."""
        if not self.cuts_stream:
            return template.marked(**ctx)
        return self._cut(template.marked(**ctx), ctx)

    def frames(self, template: Template, **ctx) -> Iterator[tuple[float, bytes]]:
        """`template`'s stream rendered with `ctx` as SSE (`Template.frames`), as `events` cuts it."""
        if not self.cuts_stream:
            return template.frames(**ctx)
        return sse.framed(self._cut(template.marked(**ctx), ctx))

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
