"""A request's take from its rate limits (llmsim.state.ratelimits), as the handlers see it: the
bucket is the request's API key (`Authorization: Bearer KEY`, "" without one) and model, the
cost its input tokens plus its output cap (the model's largest output when it sets none).
The headers it earns go on the answer (llmsim.observe.observer adds them); a refusal raises."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from llmsim.observe.stats import current

if TYPE_CHECKING:   # a type only: the composition root sits above the API
    from llmsim.simulator import Simulator


def api_key(headers: Mapping[str, str]) -> str:
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def take(sim: Simulator, headers: Mapping[str, str], model, input_tokens: int,
               max_output: int | None, choices: int = 1) -> None:
    """Take this request's cost (only called when some limit is set: `sim.limiter.limits`)."""
    cost = input_tokens + (max_output if max_output is not None else model.max_output_tokens) * choices
    added = await sim.limiter.take(api_key(headers), model.id, cost)
    ex = current()
    if added and ex is not None:
        ex.headers = added
