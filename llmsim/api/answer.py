"""How a generating request is delivered (llmsim.api.adapters): paced SSE events when
streaming (slowed by the load with a serving ticket), else the JSON body once the plan's end
has come."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.observe import stats
from llmsim.pacing import transport

if TYPE_CHECKING:   # types only: the composition root sits above the API
    from llmsim.simulator import Simulator


def events(simulator: Simulator, frames, start: float, ticket=None) -> transport.Paced:
    """A stream's (due time, frame) pairs paced from `start`, each gap after the first token
    slowed by the load when the serving model admitted it (`ticket`)."""
    if ticket is not None:
        frames, start = ticket.timed(frames), ticket.start
    keepalive = simulator.settings.keepalive_ms
    paced = transport.Paced(frames, start, simulator.clock, keepalive / 1000 if keepalive else None,
                            simulator.stats.lateness, simulator.drain)
    if (ex := stats.CURRENT.get()) is not None:     # (stats.current)
        paced.on_left = ex.left         # a stream its client leaves counts what it sent
    return paced


def wait(simulator: Simulator, plan, start: float, ticket=None):
    """What waits until a whole answer's end (`plan.end_at`, slowed by the load with a
    `ticket`, whose slot it then gives back): an awaitable, or None for an answer due at once
    on the real clock (nothing to wait for: no coroutine is made)."""
    if ticket is not None:
        return _served(simulator, plan, ticket)
    if plan.end_at or not simulator.clock.realtime:
        return simulator.clock.sleep_until(start + plan.end_at)
    return None


async def _served(simulator: Simulator, plan, ticket) -> None:
    try:
        await simulator.clock.sleep_until(ticket.start + ticket.end_at(plan.end_at))
    finally:
        ticket.release()


async def reply(simulator: Simulator, template, plan, start: float, stream: bool = False, fault=None,
                ticket=None, **variables):
    """`template`'s answer for `plan`: its stream as paced SSE (as `fault` cuts it), else its
    body as JSON at the plan's end; `variables` are the template's other variables."""
    if stream:
        return transport.SSEResponse(events(simulator, fault.frames(template, plan=plan, **variables), start, ticket))
    if (waiting := wait(simulator, plan, start, ticket)) is not None:
        await waiting
    return transport.json_response(template.body_json(plan=plan, **variables))
