"""Stored responses: GET / DELETE /responses/{id}, its input items, cancel, and
POST /responses/input_tokens (the count a request would have)."""
from __future__ import annotations

from llmsim.errors import InvalidRequestError
from llmsim.pacing import transport
from llmsim.sim import responses_plan as planning
from llmsim.simulator import Simulator
from llmsim.state.prior import Prior
from llmsim.state.responses import response_not_found
from llmsim.state.store import paginate


class ResponseStoreHandlers:
    def __init__(self, simulator: Simulator):
        self.simulator = simulator
        self.state = simulator.state

    async def retrieve(self, response_id: str, stream: bool = False, starting_after: int | None = None,
                       include=None, include_obfuscation=None):
        record = await self.state.get(response_id)
        if not stream:
            return transport.json_response(record.response_json())
        if not record.events:
            raise InvalidRequestError("This response cannot be streamed because it was created "
                                      "with neither stream=true nor background=true.", param="stream")
        after = -1 if starting_after is None else starting_after
        return transport.SSEResponse(self.state.jobs.follow(response_id, after, live=record.background))

    async def delete(self, response_id: str):
        if not await self.state.store.delete_response(response_id):
            raise response_not_found(response_id)
        self.state.jobs.interrupt(response_id)
        return transport.json_response(self.state.render("deleted_response", id=response_id))

    async def list_input_items(self, response_id: str, after: str | None = None, before: str | None = None,
                               limit: int = 20, order: str = "desc", include=None):
        record = await self.state.get(response_id)
        page = paginate(self.state.inputs_of(record), after=after, before=before, limit=limit, order=order)
        if page is None:
            raise InvalidRequestError(f"No input item with id '{after if before is None else before}' "
                                      f"in response '{response_id}'.",
                                      param="after" if before is None else "before")
        return transport.json_response(self.state.render("item_list", items=page.items,
                                                         has_more=page.has_more))

    async def cancel(self, response_id: str):
        return transport.json_response(await self.state.cancel(response_id))

    async def count_input_tokens(self, body: dict):
        simulator = self.simulator
        prior = self.state.prior(body)
        if not isinstance(prior, Prior):        # (a coroutine: the store is read)
            prior = await prior
        model = body.get("model") or next(iter(simulator.catalogue)).id
        plan = planning.plan_response({**body, "model": model}, simulator.context(model), prior.turns,
                                      generate=False)
        return transport.json_response(self.state.render("input_token_count",
                                                         input_tokens=plan.usage.input_tokens))
