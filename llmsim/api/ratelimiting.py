"""A request's take from its rate limits (llmsim.state.ratelimits), as the handlers see it: the
bucket is the request's API key (`Authorization: Bearer KEY`, "" without one) and model, the
cost its input tokens plus its output cap (the model's largest output when it sets none).
The headers it earns go on the answer (llmsim.observe.observer adds them); a refusal raises."""
from __future__ import annotations

from typing import Mapping

from llmsim.observe.stats import current
from llmsim.simulator import Simulator


def api_key(authorization: str | bytes | None) -> str:
    """The key of an `Authorization` header's value ("" for none, or another scheme)."""
    if not authorization:
        return ""
    if isinstance(authorization, bytes):
        authorization = authorization.decode("latin-1")
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def take(sim: Simulator, model, input_tokens: int, max_output: int | None, choices: int = 1,
               headers: Mapping[str, str] | None = None) -> None:
    """Take this request's cost (only called when some limit is set: `sim.limiter.limits`).
    `headers`: a WebSocket's upgrade request's; an HTTP request's are its exchange's."""
    cost = input_tokens + (max_output if max_output is not None else model.max_output_tokens) * choices
    ex = current()
    if headers is not None:
        key = api_key(headers.get("authorization"))
    else:
        key = api_key(ex.request_headers.get(b"authorization") if ex is not None and ex.request_headers else None)
    limiter = sim.limiter
    if limiter.waits:
        added = await limiter.take(key, model.id, cost)
    else:                   # (no coroutine of its own for a store that answers at once)
        added = limiter.take_now(key, model.id, cost)
    if added and ex is not None:
        ex.extra_headers = added
